"""Moved to :mod:`apollo.quality` (the Great Expectations context, checkpoints and suites)."""

from apollo.quality import DataQualityError, QualityReport, check_dataset, check_masks, check_trajectories

__all__ = ["DataQualityError", "QualityReport", "check_dataset", "check_masks", "check_trajectories"]
