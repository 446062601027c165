"""The home page's box of repair campaigns still open (``recovery.campaigns``)."""

from core.identity import Identity
from history.models import CAMPAIGN_OPEN, Campaign, ItemOutcome
from recovery.campaigns import campaign_tallies, campaign_visible

SHOWN = 10


def campaigns_box(identity: Identity | None) -> list[dict]:
    """The campaigns still open (awaiting approval, ready, running, waiting to be widened, paused, halted) the
    identity may see, the latest first, each with its progress."""
    if identity is None:
        return []
    latest = Campaign.objects.filter(namespace_id=identity.namespace_id, state__in=CAMPAIGN_OPEN)
    shown = [campaign for campaign in latest.order_by("-created_at")[:SHOWN] if campaign_visible(campaign, identity)]
    tallies = campaign_tallies(shown)
    return [
        {
            "campaign": campaign,
            "done": campaign.total - tallies[campaign.id].counts[ItemOutcome.PENDING],
            "counts": tallies[campaign.id].counts,
        }
        for campaign in shown
    ]
