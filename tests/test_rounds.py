"""The rounds of a multi-process run, as every hosting process decides them (``hosting.rounds``).

Every process applies the same rules to the same reports, so these tests
drive ``Rounds`` by hand with the reports a run would make and check the
plan and the verdict every process reaches alike.
"""

from __future__ import annotations

from simcluster.hosting import control as C
from simcluster.hosting import remote as _remote
from simcluster.hosting.rounds import Rounds, window_end


def _report(time: float, sent: list[int], *, next: float | None, unfinished: int = 1,
            earliest: float | None = None, failure: C.Failure | None = None,
            held: bool = False, open: int = 0) -> C.Report:
    return C.Report(time, sent, earliest, unfinished, next, failure, [], held, open)


def test_every_process_runs_first_then_only_those_with_work() -> None:
    rounds = Rounds(0, [1, 1, 1], 0.0)
    assert rounds.plan().runs == [True, True, True]  # every rank starts at 0
    # process 0 sent one envelope to process 2, landing at 1 us; process 1 is waiting
    assert rounds.absorb([_report(0.0, [0, 0, 1], next=None, earliest=1e-6),
                          _report(0.0, [0, 0, 0], next=None),
                          _report(0.0, [0, 0, 0], next=None)]) is None
    plan = rounds.plan()
    assert (plan.now, plan.until, plan.close) == (1e-6, None, False)
    assert plan.runs == [False, False, True]  # only the receiver has something to do
    assert rounds.counts[2] == [1, 0, 0]


def test_a_lookahead_makes_windows_unless_a_handshake_is_under_way() -> None:
    rounds = Rounds(1, [2, 2], 1e-6)
    plan = rounds.plan()
    assert plan.until == window_end(0.0, 1e-6) and 0.0 < plan.until < 1e-6
    assert rounds.absorb([_report(0.9e-6, [0, 0], next=2e-6, open=1),
                          _report(0.5e-6, [0, 0], next=3e-6)]) is None
    plan = rounds.plan()
    assert (plan.now, plan.until) == (2e-6, None)  # an open rendezvous: one instant at a time
    assert (rounds.rounds, rounds.windows) == (2, 1)


def test_an_instant_with_held_transfers_is_closed_by_one_more_round_at_the_same_time() -> None:
    rounds = Rounds(0, [1, 1], 0.0)
    rounds.plan()
    assert rounds.absorb([_report(0.0, [0, 0], next=None, held=True),
                          _report(0.0, [0, 0], next=5e-6)]) is None
    plan = rounds.plan()
    assert (plan.now, plan.close, plan.runs) == (0.0, True, [True, False])


def test_the_earliest_failure_by_time_then_rank_ends_the_rounds() -> None:
    late = C.Failure(0, _remote.encode_exception(ValueError("late")))
    early = C.Failure(3, _remote.encode_exception(KeyError("early")))
    rounds = Rounds(0, [2, 2], 0.0)
    rounds.plan()
    outcome = rounds.absorb([_report(4e-6, [0, 0], next=None, failure=late),
                             _report(2e-6, [0, 0], next=None, failure=early)])
    assert outcome is not None
    assert (outcome.time, outcome.rank, outcome.proc, outcome.deadlock) == (2e-6, 3, 1, False)
    exc = _remote.decode_exception(outcome.exc, "process 1")
    assert type(exc) is KeyError and exc.args == ("early",)


def test_nothing_left_is_the_end_or_a_deadlock_at_the_last_events_time() -> None:
    done = Rounds(0, [1, 1], 0.0)
    done.plan()
    outcome = done.absorb([_report(3e-6, [0, 0], next=None, unfinished=0),
                           _report(1e-6, [0, 0], next=None, unfinished=0)])
    assert outcome is not None and (outcome.deadlock, outcome.exc, outcome.time) == (False, None, 3e-6)
    stuck = Rounds(0, [1, 1], 0.0)
    stuck.plan()
    outcome = stuck.absorb([_report(3e-6, [0, 0], next=None, unfinished=0),
                            _report(1e-6, [0, 0], next=None, unfinished=1)])
    assert outcome is not None and (outcome.deadlock, outcome.time) == (True, 3e-6)
    assert stuck.unfinished == [0, 1]


def test_every_process_reaches_the_same_plans_from_the_same_reports() -> None:
    reports = [[_report(0.0, [0, 2, 0], next=4e-6, earliest=1e-6),
                _report(0.0, [1, 0, 0], next=None),
                _report(0.0, [0, 0, 0], next=2e-6)],
               [_report(1e-6, [0, 0, 0], next=4e-6),  # p0 and p1 got envelopes; p2 waits
                _report(1e-6, [0, 0, 1], next=None, earliest=3e-6), None]]
    seen = []
    for me in range(3):
        rounds = Rounds(me, [1, 1, 1], 0.0)
        plans = [rounds.plan()]
        for batch in reports:
            assert [r is not None for r in batch] == plans[-1].runs
            assert rounds.absorb(batch) is None
            plans.append(rounds.plan())
        seen.append((plans, rounds.counts))
    assert seen[0] == seen[1] == seen[2]
    assert [p.now for p in seen[0][0]] == [0.0, 1e-6, 2e-6]
