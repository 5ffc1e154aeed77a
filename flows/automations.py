"""A failure notification for the pipeline: a Prefect automation that fires when an
``apollo-pipeline`` flow run fails or crashes and sends a notification through a webhook block.

    python -m flows.automations --webhook-url https://hooks.slack.com/services/…   # once per server

The block (``apollo-alerts``, a CustomWebhookNotificationBlock posting ``{"text": …}``) is created
or updated from the URL; without ``--webhook-url`` an existing block of that name is used.
Running it again replaces the automation. Every failed run also logs an ERROR line and leaves an
``apollo-pipeline-failure`` artifact (``flows/pipeline.py``).
"""

from __future__ import annotations

import argparse
import sys

BLOCK = "apollo-alerts"
NAME = "apollo-pipeline-failed"


def ensure_automation(webhook_url: str | None = None, block_name: str = BLOCK):
    from prefect.automations import Automation
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.events.actions import SendNotification
    from prefect.events.schemas.automations import EventTrigger, Posture

    if webhook_url:
        block = CustomWebhookNotificationBlock(name=block_name, url=webhook_url,
                                               json_data={"text": "{{subject}}: {{body}}"})
        block_id = block.save(block_name, overwrite=True)
    else:
        try:
            block_id = CustomWebhookNotificationBlock.load(block_name)._block_document_id
        except ValueError:
            raise ValueError(f"no notification block '{block_name}' yet; pass --webhook-url URL once") from None
    try:
        Automation.read(name=NAME).delete()
    except (ValueError, Exception):  # noqa: BLE001 - not there yet
        pass
    return Automation(
        name=NAME,
        description="An apollo-pipeline flow run failed or crashed.",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Failed", "prefect.flow-run.Crashed"},
            match_related={"prefect.resource.role": "flow", "prefect.resource.name": "apollo-pipeline"},
            posture=Posture.Reactive, threshold=1, within=0),
        actions=[SendNotification(block_document_id=block_id,
                                  subject="apollo-pipeline run {{ flow_run.name }}: {{ flow_run.state.name }}",
                                  body="{{ flow_run.state.message }}")],
    ).create()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--webhook-url", default=None, help="where notifications are posted (creates the block)")
    args = ap.parse_args(argv)
    try:
        a = ensure_automation(args.webhook_url)
    except Exception as e:  # one sentence, no traceback
        print(f"automation: {e}", file=sys.stderr)
        return 1
    print(f"automation '{a.name}' ({a.id}) notifies through block '{BLOCK}' when a pipeline run fails")
    return 0


if __name__ == "__main__":
    sys.exit(main())
