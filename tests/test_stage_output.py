"""The flow forwards a stage's output line by line, progress-bar redraws included (throttled)."""

from tasks.dvc_tasks import _split_output


def test_progress_redraws_are_lines_marked_as_redraws():
    chunks = [b"Running stage 'x':\n> python -m apollo stage x\n", b"train:  10%|#   | 1/10\r",
              b"train:  20%|##  | 2/10\rtrain: 100%|####| 10/10\n", b"done\r\n", b"tail without newline"]
    got = list(_split_output(chunks))
    assert got == [("Running stage 'x':", False), ("> python -m apollo stage x", False),
                   ("train:  10%|#   | 1/10", True), ("train:  20%|##  | 2/10", True),
                   ("train: 100%|####| 10/10", False), ("done", False), ("tail without newline", False)]


def test_a_line_split_across_chunks_is_one_line():
    assert list(_split_output([b"par", b"tial li", b"ne\nnext"])) == [("partial line", False), ("next", False)]
