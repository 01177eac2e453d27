"""kill -9 right after Slack's stop button was acknowledged: the stop is not lost.

Slack sends ``agent_session_stopped`` once it has a 200 and never again. So the stop must be written before
the 200: a replica killed the moment Slack has its ack leaves the turn stopped in Redis, and the process
started after it ends the turn as stopped. Before, the stop ran after the ack; the kill lost it, and the
restarted replica resumed the turn as if nobody had pressed anything.
"""

from __future__ import annotations

from localslack.seed import ALICE, GENERAL
from tests.chaos.harness import Cluster, Trial, click, live_cards, open_turn, poll

AFTER_THE_STOP_ACK = "right after the stop button's ack"


async def test_a_stop_acknowledged_just_before_a_kill_9_still_stops_the_turn(local_slack, brain, redis_url,
                                                                              tmp_path):
    # a slow tool: the approved call still runs when alice presses stop
    cluster = Cluster(local_slack, brain, redis_url, tmp_path, lease_seconds=1.0, tool_delay=8.0)
    try:
        await cluster.start("a")
        cluster.route("a")
        trial = Trial(key="stop1")
        await open_turn(local_slack, trial)
        session = lambda: local_slack.assistant_state(GENERAL, trial.thread_ts)  # noqa: E731
        await local_slack.wait_for(lambda: session().session_status == "suspended", 10)  # "Waiting for …"
        assert await click(local_slack, trial)
        await poll(lambda: cluster.starts(trial.key), 10)
        await local_slack.wait_for(lambda: session().session_status == "processing", 10)  # the stop button shows
        pressed = await local_slack.stop_agent_session(ALICE, GENERAL, trial.thread_ts)
        cluster.kill("a", AFTER_THE_STOP_ACK)  # the moment Slack has its 200: it sends nothing more
        assert pressed is not None and pressed.status == 200

        await cluster.start("a")  # a fresh process on the same Redis (Slack's deliveries follow it)
        stopped = await local_slack.wait_for_message(GENERAL, thread_ts=trial.thread_ts,
                                                     predicate=lambda m: "Stopped" in (m.text or ""), timeout_s=20)
        assert stopped is not None
        assert not [m for m in local_slack.messages(GENERAL, trial.thread_ts)
                    if "interrupted" in (m.text or "") or (m.text or "").startswith("wrote stop1")]
        assert cluster.ledger(trial.key) == [], "the stopped call's effect never landed, nor was it run again"
        assert len(cluster.starts(trial.key)) == 1
        assert not live_cards(local_slack, trial)
    finally:
        await cluster.stop_all()
