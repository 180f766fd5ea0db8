"""Latency models give the times their formulas say, exactly.

Port tests use powers of two for alpha, beta and sizes, so every sum is exact
in binary floating point and the expected times are compared with ``==``.
"""

from __future__ import annotations

import math
import random
import re

import pytest

import simcluster as sc
from simcluster import latency
from simcluster.latency import (
    AlphaBeta,
    Constant,
    Hierarchical,
    Jitter,
    LatencyModel,
    LogGP,
    Ports,
    Zero,
    parse,
)

ALPHA = 2.0**-20  # about 1 us
BETA = 2.0**-30  # about 1 GB/s
N = 4096  # bytes; N * BETA == 2**-18 exactly


def bind(model: LatencyModel, world_size: int = 4, seed: int = 0) -> Ports:
    return model.bind(world_size, random.Random(seed))


# ---- Zero and Constant ----


def test_zero_delivers_at_post_time_and_says_so() -> None:
    ports = bind(Zero())
    assert ports.zero is True
    assert ports.transfer(0, 1, 10**9, 0.0) == (0.0, 0.0)
    assert ports.transfer(2, 3, 0, 1.25) == (1.25, 1.25)


def test_constant_adds_fixed_delay_whatever_the_size() -> None:
    ports = bind(Constant(seconds=0.5))
    assert ports.zero is False
    assert ports.transfer(0, 1, 0, 1.0) == (1.0, 1.5)
    assert ports.transfer(0, 1, 10**9, 1.0) == (1.0, 1.5)  # no port contention
    assert ports.transfer(2, 1, 8, 1.0) == (1.0, 1.5)


def test_models_other_than_zero_cost_nothing_to_reduce_by_default() -> None:
    assert Zero().reduce_time(10**6) == 0.0
    assert Constant(1.0).reduce_time(10**6) == 0.0
    assert LogGP(L=1.0, o=1.0, g=1.0, G=1.0).reduce_time(10**6) == 0.0
    assert AlphaBeta(alpha=1.0, beta=1.0).reduce_time(10**6) == 0.0


def test_free_reductions_says_whether_reduce_time_is_zero_for_every_size() -> None:
    free, charged = AlphaBeta(1e-6, 1e-9), AlphaBeta(1e-6, 1e-9, gamma=1e-10)
    assert Zero().free_reductions and LogGP(1.0, 1.0, 1.0, 1.0).free_reductions
    assert free.free_reductions and not charged.free_reductions
    assert Hierarchical(charged, free, ranks_per_node=2).free_reductions is False  # intra reduces
    assert Hierarchical(free, charged, ranks_per_node=2).free_reductions is True
    assert Jitter(charged).free_reductions is False and Jitter(free).free_reductions is True

    class Costly(Constant):
        def reduce_time(self, nbytes: int) -> float:
            return 1e-9 * nbytes

    assert Costly(1.0).free_reductions is False  # a subclass that charges is never skipped


# ---- AlphaBeta ----


def test_alphabeta_single_message_costs_alpha_plus_n_beta() -> None:
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    t = 0.75
    assert ports.transfer(0, 1, N, t) == (t + N * BETA, t + ALPHA + N * BETA)


def test_alphabeta_single_message_matches_formula_with_decimal_parameters() -> None:
    alpha, beta, n = 1e-6, 1e-10, 12345
    depart, arrive = bind(AlphaBeta(alpha=alpha, beta=beta)).transfer(3, 0, n, 2e-3)
    assert math.isclose(depart, 2e-3 + n * beta, rel_tol=1e-12)
    assert math.isclose(arrive, 2e-3 + alpha + n * beta, rel_tol=1e-12)


def test_alphabeta_zero_byte_message_costs_alpha_and_holds_no_port() -> None:
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    assert ports.transfer(0, 1, 0, 1.0) == (1.0, 1.0 + ALPHA)
    assert ports.transfer(0, 1, 0, 1.0) == (1.0, 1.0 + ALPHA)


def test_alphabeta_back_to_back_sends_start_when_sender_port_frees() -> None:
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    assert ports.transfer(0, 1, N, 0.0) == (N * BETA, ALPHA + N * BETA)
    # posted at 0 but the port is busy until N*beta
    assert ports.transfer(0, 2, N, 0.0) == (2 * N * BETA, N * BETA + ALPHA + N * BETA)


def test_alphabeta_send_posted_after_port_frees_starts_at_post_time() -> None:
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    ports.transfer(0, 1, N, 0.0)
    t = 1.0  # long after N*beta
    assert ports.transfer(0, 1, N, t) == (t + N * BETA, t + ALPHA + N * BETA)


def test_alphabeta_incast_serialises_on_receiver_port() -> None:
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    arrivals = [ports.transfer(src, 3, N, 0.0)[1] for src in (0, 1, 2)]
    assert arrivals == [ALPHA + N * BETA, ALPHA + 2 * N * BETA, ALPHA + 3 * N * BETA]


def test_alphabeta_incast_senders_are_free_after_their_own_n_beta() -> None:
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    departs = [ports.transfer(src, 3, N, 0.0)[0] for src in (0, 1, 2)]
    assert departs == [N * BETA] * 3


def test_alphabeta_fan_out_serialises_on_sender_port() -> None:
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    got = [ports.transfer(0, dst, N, 0.0) for dst in (1, 2, 3)]
    assert got == [(k * N * BETA, ALPHA + k * N * BETA) for k in (1, 2, 3)]


def test_alphabeta_full_duplex_send_and_receive_do_not_slow_each_other() -> None:
    idle = (N * BETA, ALPHA + N * BETA)
    exchange = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    assert exchange.transfer(0, 1, N, 0.0) == idle
    assert exchange.transfer(1, 0, N, 0.0) == idle
    ring = bind(AlphaBeta(alpha=ALPHA, beta=BETA))  # every rank sends and receives at once
    assert [ring.transfer(r, (r + 1) % 4, N, 0.0) for r in range(4)] == [idle] * 4


def test_alphabeta_receiver_idle_again_takes_next_message_without_queueing() -> None:
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    ports.transfer(0, 3, N, 0.0)  # recv_free[3] = alpha + N*beta
    t = 1.0
    assert ports.transfer(1, 3, N, t) == (t + N * BETA, t + ALPHA + N * BETA)


def test_alphabeta_queued_arrival_is_previous_arrival_plus_n_beta() -> None:
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    first = ports.transfer(0, 3, 4 * N, 0.0)[1]  # ALPHA + 4N*beta
    second = ports.transfer(1, 3, N, 0.0)[1]  # alone it would be ALPHA + N*beta
    assert second == first + N * BETA


def test_alphabeta_ring_steps_match_textbook_all_reduce_time() -> None:
    # 2(p-1) dependent ring steps, each rank sending n/p bytes right: 2(p-1)(alpha + n/p*beta)
    p, n = 8, 8 * N
    ports = bind(AlphaBeta(alpha=ALPHA, beta=BETA), world_size=p)
    now = [0.0] * p
    for _ in range(2 * (p - 1)):
        arrive = [ports.transfer(r, (r + 1) % p, n // p, now[r])[1] for r in range(p)]
        now = [max(now[r], arrive[(r - 1) % p]) for r in range(p)]
    assert now == [2 * (p - 1) * (ALPHA + n // p * BETA)] * p


def test_alphabeta_reduce_time_is_gamma_per_byte() -> None:
    model = AlphaBeta(alpha=ALPHA, beta=BETA, gamma=2.0**-32)
    assert model.reduce_time(N) == N * 2.0**-32
    assert model.reduce_time(0) == 0.0


def test_alphabeta_gamma_does_not_change_message_times() -> None:
    plain = bind(AlphaBeta(alpha=ALPHA, beta=BETA))
    with_gamma = bind(AlphaBeta(alpha=ALPHA, beta=BETA, gamma=1.0))
    assert with_gamma.transfer(0, 1, N, 0.0) == plain.transfer(0, 1, N, 0.0)


def test_alphabeta_ports_are_per_run() -> None:
    model = AlphaBeta(alpha=ALPHA, beta=BETA)
    first, second = bind(model), bind(model)
    first.transfer(0, 1, N, 0.0)
    assert second.transfer(0, 1, N, 0.0) == (N * BETA, ALPHA + N * BETA)


# ---- LogGP ----

L_, O_, G_PER_BYTE = 2.0**-20, 2.0**-23, 2.0**-30


def test_loggp_single_message_costs_two_o_plus_l_plus_n_minus_one_g() -> None:
    ports = bind(LogGP(L=L_, o=O_, g=2.0**-22, G=G_PER_BYTE))
    t = 0.5
    depart, arrive = ports.transfer(0, 1, N, t)
    assert depart == t + O_ + (N - 1) * G_PER_BYTE
    assert arrive == t + 2 * O_ + L_ + (N - 1) * G_PER_BYTE


def test_loggp_single_message_matches_formula_with_decimal_parameters() -> None:
    L, o, g, G, n = 1.5e-6, 3e-7, 4e-7, 1e-10, 1000
    depart, arrive = bind(LogGP(L=L, o=o, g=g, G=G)).transfer(1, 2, n, 1e-3)
    assert math.isclose(depart, 1e-3 + o + (n - 1) * G, rel_tol=1e-12)
    assert math.isclose(arrive, 1e-3 + 2 * o + L + (n - 1) * G, rel_tol=1e-12)


@pytest.mark.parametrize("nbytes", [0, 1])
def test_loggp_empty_and_one_byte_messages_cost_2o_plus_L(nbytes: int) -> None:
    ports = bind(LogGP(L=L_, o=O_, g=0.0, G=G_PER_BYTE))
    assert ports.transfer(0, 1, nbytes, 0.0) == (O_, 2 * O_ + L_)


def test_loggp_back_to_back_small_sends_are_spaced_by_gap() -> None:
    g = 2.0**-18  # larger than o + (n-1)G for n = 1
    ports = bind(LogGP(L=L_, o=O_, g=g, G=G_PER_BYTE))
    starts = [ports.transfer(0, dst, 1, 0.0)[0] - O_ for dst in (1, 2, 3)]
    assert starts == [0.0, g, 2 * g]


def test_loggp_back_to_back_long_sends_are_spaced_by_o_plus_injection() -> None:
    g = 2.0**-24  # smaller than o + (n-1)G
    ports = bind(LogGP(L=L_, o=O_, g=g, G=G_PER_BYTE))
    busy = O_ + (N - 1) * G_PER_BYTE
    got = [ports.transfer(0, dst, N, 0.0) for dst in (1, 2, 3)]
    assert got == [(k * busy, k * busy + L_ + O_) for k in (1, 2, 3)]


def test_loggp_send_completes_before_the_gap_ends() -> None:
    g = 2.0**-18
    ports = bind(LogGP(L=L_, o=O_, g=g, G=G_PER_BYTE))
    assert ports.transfer(0, 1, 1, 0.0)[0] == O_  # depart: only the overhead
    assert ports.transfer(0, 1, 1, O_)[0] == g + O_  # the next send waits for the gap


def test_loggp_incast_arrivals_are_spaced_at_the_receiver() -> None:
    g = 2.0**-18
    ports = bind(LogGP(L=L_, o=O_, g=g, G=G_PER_BYTE))
    arrivals = [ports.transfer(src, 3, 1, 0.0)[1] for src in (0, 1, 2)]
    first = 2 * O_ + L_
    assert arrivals == [first, first + g, first + 2 * g]


def test_loggp_full_duplex_send_and_receive_do_not_slow_each_other() -> None:
    ports = bind(LogGP(L=L_, o=O_, g=2.0**-18, G=G_PER_BYTE))
    one = (O_ + (N - 1) * G_PER_BYTE, 2 * O_ + L_ + (N - 1) * G_PER_BYTE)
    assert ports.transfer(0, 1, N, 0.0) == one
    assert ports.transfer(1, 0, N, 0.0) == one


# ---- Hierarchical ----


def test_hierarchical_uses_intra_within_a_node_and_inter_between_nodes() -> None:
    ports = bind(Hierarchical(Constant(1.0), Constant(100.0), ranks_per_node=2), world_size=5)
    assert ports.transfer(0, 1, 8, 0.0) == (0.0, 1.0)  # node 0
    assert ports.transfer(2, 3, 8, 0.0) == (0.0, 1.0)  # node 1
    assert ports.transfer(1, 2, 8, 0.0) == (0.0, 100.0)  # node 0 -> node 1
    assert ports.transfer(4, 0, 8, 0.0) == (0.0, 100.0)  # node 2 (partial) -> node 0
    assert ports.transfer(3, 3, 8, 0.0) == (0.0, 1.0)  # a rank to itself stays on its node


def test_hierarchical_intra_and_inter_ports_are_separate() -> None:
    model = AlphaBeta(alpha=ALPHA, beta=BETA)
    ports = bind(Hierarchical(intra=model, inter=model, ranks_per_node=2))
    assert ports.transfer(0, 1, N, 0.0) == (N * BETA, ALPHA + N * BETA)
    # rank 0's inter-node port is idle although its intra-node port is busy
    assert ports.transfer(0, 2, N, 0.0) == (N * BETA, ALPHA + N * BETA)
    # but a second inter-node message waits for the first
    assert ports.transfer(0, 3, N, 0.0) == (2 * N * BETA, ALPHA + 2 * N * BETA)


def test_hierarchical_reduce_time_comes_from_intra() -> None:
    model = Hierarchical(
        intra=AlphaBeta(alpha=0.0, beta=0.0, gamma=2.0**-30),
        inter=AlphaBeta(alpha=0.0, beta=0.0, gamma=1.0),
        ranks_per_node=4,
    )
    assert model.reduce_time(N) == N * 2.0**-30


class CountingModel(LatencyModel):
    """A third-party model: counts its binds and delays by 1 second."""

    __slots__ = ("binds",)

    def __init__(self) -> None:
        self.binds = 0

    def bind(self, world_size: int, rng: random.Random) -> Ports:
        self.binds += 1
        return bind(Constant(1.0), world_size)


def test_hierarchical_binds_each_submodel_once_per_run() -> None:
    intra, inter = CountingModel(), CountingModel()
    ports = bind(Hierarchical(intra, inter, ranks_per_node=2), world_size=8)
    for src in range(8):
        for dst in range(8):
            ports.transfer(src, dst, 8, 0.0)
    assert (intra.binds, inter.binds) == (1, 1)


def test_hierarchical_and_jitter_are_zero_only_when_all_parts_are() -> None:
    assert bind(Hierarchical(Zero(), Zero(), ranks_per_node=2)).zero is True
    assert bind(Hierarchical(Zero(), Constant(1.0), ranks_per_node=2)).zero is False
    assert bind(Jitter(Zero())).zero is True
    assert bind(Jitter(Constant(1.0))).zero is False


# ---- Jitter ----


def jittered_times(model: LatencyModel, seed: int) -> list[tuple[float, float]]:
    ports = bind(model, world_size=4, seed=seed)
    return [ports.transfer(i % 4, (i + 1) % 4, 100 * i, i * 1e-3) for i in range(50)]


def test_jitter_is_deterministic_for_a_seed() -> None:
    model = Jitter(AlphaBeta(alpha=1e-6, beta=1e-9), rel=0.2)
    assert jittered_times(model, seed=7) == jittered_times(model, seed=7)


def test_jitter_differs_for_another_seed() -> None:
    model = Jitter(AlphaBeta(alpha=1e-6, beta=1e-9), rel=0.2)
    assert jittered_times(model, seed=7) != jittered_times(model, seed=8)


def test_jitter_scales_the_delay_by_one_plus_rel_u_hashed_from_the_seed_and_the_message() -> None:
    key = random.Random(3).getrandbits(64)  # the one draw Jitter makes from the run's rng
    ports = Jitter(Constant(2.0), rel=0.25).bind(4, random.Random(3))
    for seq, t in enumerate((0.0, 1.0, 2.5)):
        depart, arrive = ports.transfer(0, 1, 8, t)
        u = 2.0 * latency._unit(key, 0, 1, seq) - 1.0  # (seed, src, dst, the sender's seq)
        assert (depart, arrive) == (t, t + 2.0 * (1.0 + 0.25 * u))


def test_jitter_noise_is_a_function_of_the_message_not_of_the_order_of_calls() -> None:
    model = Jitter(Constant(1.0), rel=0.5)
    a, b = model.bind(4, random.Random(9)), model.bind(4, random.Random(9))
    first = [a.transfer(0, 1, 8, 0.0), a.transfer(2, 3, 8, 0.0), a.transfer(0, 1, 8, 0.0)]
    second = [b.transfer(2, 3, 8, 0.0), b.transfer(0, 1, 8, 0.0), b.transfer(0, 1, 8, 0.0)]
    assert (first[0], first[1], first[2]) == (second[1], second[0], second[2])
    assert first[0] != first[2]  # the sender's next message draws other noise


def test_jitter_splits_like_its_model_and_both_halves_equal_transfer() -> None:
    model = Jitter(AlphaBeta(alpha=1e-6, beta=1e-9), rel=0.3)
    whole, split = bind(model, seed=5), bind(model, seed=5)
    for i in range(40):
        src, dst, n, t = i % 3, 3, 100 * (i % 5), (i // 4) * 1e-6
        depart, wire = split.send_side(src, dst, n, t)
        assert whole.transfer(src, dst, n, t) == (depart, split.recv_side(src, dst, n, wire))


def test_jitter_stays_within_rel_band_and_leaves_depart_alone() -> None:
    rel = 0.1
    plain = bind(AlphaBeta(alpha=1e-6, beta=1e-9))
    noisy = bind(Jitter(AlphaBeta(alpha=1e-6, beta=1e-9), rel=rel), seed=11)
    for i in range(200):
        t, src, dst, n = i * 1e-4, i % 4, (i * 3 + 1) % 4, 64 * i
        depart, arrive = plain.transfer(src, dst, n, t)
        jdepart, jarrive = noisy.transfer(src, dst, n, t)
        assert jdepart == depart
        delay = arrive - t
        assert delay * (1 - rel) * (1 - 1e-12) <= jarrive - t <= delay * (1 + rel) * (1 + 1e-12)


def test_jitter_never_arrives_before_the_message_is_posted() -> None:
    ports = bind(Jitter(Constant(1.0), rel=3.0), seed=1)
    arrivals = [(t, ports.transfer(0, 1, 8, t)[1]) for t in (i * 0.5 for i in range(200))]
    assert all(arrive >= t for t, arrive in arrivals)
    assert any(arrive == t for t, arrive in arrivals)  # the clamp was exercised


def test_jitter_reduce_time_is_the_inner_models() -> None:
    assert Jitter(AlphaBeta(alpha=0.0, beta=0.0, gamma=0.5)).reduce_time(8) == 4.0


# ---- parse ----


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("zero", Zero()),
        ("  ZERO ", Zero()),
        ("constant:5us", Constant(5e-06)),
        ("constant:5\N{MICRO SIGN}s", Constant(5e-06)),
        ("constant:2s", Constant(2.0)),
        ("constant:3ms", Constant(3e-3)),
        ("constant:250ns", Constant(2.5e-7)),
        ("constant:0.1us", Constant(1e-7)),
        ("constant:1e-6", Constant(1e-6)),
        ("constant: 7 us", Constant(7e-6)),
        ("alphabeta:1us,10GB/s", AlphaBeta(alpha=1e-6, beta=1e-10)),
        ("AlphaBeta: 1us , 10GB/s", AlphaBeta(alpha=1e-6, beta=1e-10)),
        ("alphabeta:1e-6,1e-10", AlphaBeta(alpha=1e-6, beta=1e-10)),
        ("alphabeta:0,8B/s", AlphaBeta(alpha=0.0, beta=0.125)),
        ("alphabeta:0,4KB/s", AlphaBeta(alpha=0.0, beta=2.5e-4)),
        ("alphabeta:0,4MB/s", AlphaBeta(alpha=0.0, beta=2.5e-7)),
        ("alphabeta:0,4GB/s", AlphaBeta(alpha=0.0, beta=2.5e-10)),
        ("alphabeta:0,2KiB/s", AlphaBeta(alpha=0.0, beta=2.0**-11)),
        ("alphabeta:0,4MiB/s", AlphaBeta(alpha=0.0, beta=2.0**-22)),
        ("alphabeta:0,8GiB/s", AlphaBeta(alpha=0.0, beta=2.0**-33)),
        ("alphabeta:0,1ns", AlphaBeta(alpha=0.0, beta=1e-9)),
        ("alphabeta:1us,10GB/s,1e-9", AlphaBeta(alpha=1e-6, beta=1e-10, gamma=1e-9)),
        ("alphabeta:1us,10GB/s,2GB/s", AlphaBeta(alpha=1e-6, beta=1e-10, gamma=5e-10)),
        ("loggp:1us,100ns,200ns,10GB/s", LogGP(L=1e-6, o=1e-7, g=2e-7, G=1e-10)),
        ("loggp:1e-6,1e-7,2e-7,1e-10", LogGP(L=1e-6, o=1e-7, g=2e-7, G=1e-10)),
        ("loggp:2ms,1ms,0s,1MiB/s", LogGP(L=2e-3, o=1e-3, g=0.0, G=2.0**-20)),
    ],
)
def test_parse_builds_the_model_with_units_applied(spec: str, expected: LatencyModel) -> None:
    assert parse(spec) == expected


@pytest.mark.parametrize(("spec", "name"), [("hockney:1us", "hockney"), ("", ""), (":5us", "")])
def test_parse_unknown_model_lists_accepted_forms(spec: str, name: str) -> None:
    message = f"parse({spec!r}): unknown latency model {name!r}; accepted forms: {latency.FORMS}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse(spec)


def test_accepted_forms_name_every_model_and_unit() -> None:
    assert latency.FORMS.startswith(
        "zero, constant:TIME, alphabeta:ALPHA,BETA[,GAMMA], loggp:L,o,g,G, "
        "hierarchical:RANKS_PER_NODE;INTRA;INTER, jitter:REL;MODEL (times take s, ms, us"
    )
    for unit in ("ns", "B/s", "KB/s", "MB/s", "GB/s", "KiB/s", "MiB/s", "GiB/s"):
        assert unit in latency.FORMS


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("zero:1", "parse('zero:1'): zero takes 0 values, got 1; write it like 'zero'"),
        (
            "constant:",
            "parse('constant:'): constant takes 1 value (seconds), got 0; "
            "write it like 'constant:5us'",
        ),
        (
            "alphabeta:1us",
            "parse('alphabeta:1us'): alphabeta takes 2 or 3 values (alpha, beta, gamma), got 1; "
            "write it like 'alphabeta:1us,10GB/s'",
        ),
        (
            "loggp:1,2,3,4,5",
            "parse('loggp:1,2,3,4,5'): loggp takes 4 values (L, o, g, G), got 5; "
            "write it like 'loggp:1us,100ns,200ns,10GB/s'",
        ),
        (
            "constant:5xs",
            "parse('constant:5xs'): cannot read seconds from '5xs' as a time; write a number "
            "with a unit s, ms, us or ns (none means s), e.g. 'constant:5us'",
        ),
        (
            "constant:10GB/s",
            "parse('constant:10GB/s'): cannot read seconds from '10GB/s' as a time; write a "
            "number with a unit s, ms, us or ns (none means s), e.g. 'constant:5us'",
        ),
        (
            "alphabeta:1us,10Gb/s",
            "parse('alphabeta:1us,10Gb/s'): cannot read beta from '10Gb/s' as a bandwidth or "
            "seconds per byte; write a bandwidth in B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, "
            "GiB/s or TiB/s, or seconds per byte, e.g. 'alphabeta:1us,10GB/s'",
        ),
        (
            "alphabeta:-1us,10GB/s",
            "parse('alphabeta:-1us,10GB/s'): alpha must be >= 0, got '-1us'; "
            "write it like 'alphabeta:1us,10GB/s'",
        ),
        (
            "alphabeta:1us,0GB/s",
            "parse('alphabeta:1us,0GB/s'): beta bandwidth must be > 0, got '0GB/s'; "
            "write it like 'alphabeta:1us,10GB/s'",
        ),
        (
            "constant:1e400",
            "parse('constant:1e400'): seconds is out of range, got '1e400'; "
            "write it like 'constant:5us'",
        ),
        (
            "constant:nan",
            "parse('constant:nan'): cannot read seconds from 'nan' as a time; write a number "
            "with a unit s, ms, us or ns (none means s), e.g. 'constant:5us'",
        ),
    ],
)
def test_parse_rejects_bad_specs_saying_what_to_write(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse(spec)


def test_parse_builds_the_composite_models_from_specs_inside() -> None:
    assert parse("hierarchical:8;alphabeta:200ns,100GB/s;alphabeta:2us,25GB/s") == Hierarchical(
        AlphaBeta(alpha=2e-7, beta=1e-11), AlphaBeta(alpha=2e-6, beta=4e-11), ranks_per_node=8)
    assert parse("Jitter: 0.1 ; constant:5us") == Jitter(Constant(5e-6), rel=0.1)
    assert parse("jitter:0.5;hierarchical:2;zero;constant:1us") == Jitter(
        Hierarchical(Zero(), Constant(1e-6), ranks_per_node=2), rel=0.5)


@pytest.mark.parametrize(("spec", "message"), [
    ("jitter:0.1", "parse('jitter:0.1'): jitter takes 2 parts separated by ';' (a relative "
     "amplitude and the spec of the model it perturbs), got 1; write it like "
     "'jitter:0.1;alphabeta:1us,10GB/s'"),
    ("hierarchical:4;zero", "parse('hierarchical:4;zero'): hierarchical takes 3 parts separated by "
     "';' (ranks per node, an intra-node and an inter-node spec), got 2; write it like "
     "'hierarchical:8;alphabeta:200ns,100GB/s;alphabeta:2us,25GB/s'"),
    ("hierarchical:0;zero;zero", "parse('hierarchical:0;zero;zero'): cannot read '0' ("),
    ("jitter:0.1;constant:", "parse('constant:'): constant takes 1 value (seconds), got 0"),
])
def test_parse_rejects_bad_composite_specs_saying_what_to_write(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        parse(spec)


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(TypeError, match=r"^parse\(5\): spec must be a str, got int; "):
        parse(5)  # type: ignore[arg-type]


def test_unit_tables_are_decimal_and_binary() -> None:
    assert latency.TIME_UNITS["us"] == 1e-6
    assert latency.BANDWIDTH_UNITS["GB/s"] == 1e9
    assert latency.BANDWIDTH_UNITS["GiB/s"] == 2.0**30


# ---- construction, validation, description ----


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: Constant(-1.0),
            ValueError,
            "Constant(seconds=-1.0): seconds must be finite and >= 0; "
            "pass seconds, e.g. seconds=5e-06 for 5 us",
        ),
        (
            lambda: AlphaBeta(alpha=-1e-6, beta=1e-10),
            ValueError,
            "AlphaBeta(alpha=-1e-06): alpha must be finite and >= 0; "
            "pass seconds, e.g. alpha=1e-06 for 1 us",
        ),
        (
            lambda: AlphaBeta(alpha=1e-6, beta=math.inf),
            ValueError,
            "AlphaBeta(beta=inf): beta must be finite and >= 0; "
            "pass seconds per byte, e.g. beta=1e-10 for 10 GB/s",
        ),
        (
            lambda: AlphaBeta(alpha=1e-6, beta=1e-10, gamma=math.nan),
            ValueError,
            "AlphaBeta(gamma=nan): gamma must be finite and >= 0; "
            "pass seconds per byte reduced, e.g. gamma=1e-10",
        ),
        (
            lambda: AlphaBeta(alpha="1us", beta=1e-10),  # type: ignore[arg-type]
            TypeError,
            "AlphaBeta(alpha='1us'): alpha must be a number, got str; pass seconds, "
            "e.g. alpha=1e-06 for 1 us, or use latency.parse() for a string with units",
        ),
        (
            lambda: AlphaBeta(alpha=True, beta=1e-10),
            TypeError,
            "AlphaBeta(alpha=True): alpha must be a number, got bool; pass seconds, "
            "e.g. alpha=1e-06 for 1 us, or use latency.parse() for a string with units",
        ),
        (
            lambda: LogGP(L=1e-6, o=-1.0, g=0.0, G=0.0),
            ValueError,
            "LogGP(o=-1.0): o must be finite and >= 0; pass seconds, e.g. o=1e-07 for 100 ns",
        ),
        (
            lambda: LogGP(L=1e-6, o=0.0, g=-2.0, G=0.0),
            ValueError,
            "LogGP(g=-2.0): g must be finite and >= 0; pass seconds, e.g. g=2e-07 for 200 ns",
        ),
        (
            lambda: LogGP(L=-1, o=0.0, g=0.0, G=0.0),
            ValueError,
            "LogGP(L=-1): L must be finite and >= 0; pass seconds, e.g. L=1e-06 for 1 us",
        ),
        (
            lambda: LogGP(L=0.0, o=0.0, g=0.0, G=-1e-10),
            ValueError,
            "LogGP(G=-1e-10): G must be finite and >= 0; "
            "pass seconds per byte, e.g. G=1e-10 for 10 GB/s",
        ),
        (
            lambda: Hierarchical(Zero(), Zero(), ranks_per_node=0),
            ValueError,
            "Hierarchical(ranks_per_node=0): ranks_per_node must be >= 1; "
            "pass e.g. ranks_per_node=8",
        ),
        (
            lambda: Hierarchical(Zero(), Zero(), ranks_per_node=2.0),  # type: ignore[arg-type]
            TypeError,
            "Hierarchical(ranks_per_node=2.0): ranks_per_node must be an int, got float; "
            "pass e.g. ranks_per_node=8",
        ),
        (
            lambda: Hierarchical("alphabeta", Zero(), ranks_per_node=2),  # type: ignore[arg-type]
            TypeError,
            "Hierarchical(intra='alphabeta'): intra must be a LatencyModel, got str; "
            "pass a model such as AlphaBeta(alpha=1e-06, beta=1e-10)",
        ),
        (
            lambda: Jitter(None),  # type: ignore[arg-type]
            TypeError,
            "Jitter(model=None): model must be a LatencyModel, got NoneType; "
            "pass a model such as AlphaBeta(alpha=1e-06, beta=1e-10)",
        ),
        (
            lambda: Jitter(Zero(), rel=-0.1),
            ValueError,
            "Jitter(rel=-0.1): rel must be finite and >= 0; "
            "pass a fraction, e.g. rel=0.1 for ±10%",
        ),
    ],
)
def test_constructors_reject_bad_parameters_naming_them(
    build: object, error: type[Exception], message: str
) -> None:
    assert callable(build)
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        build()


@pytest.mark.parametrize("world_size", [0, -1, 2.0, True])
def test_bind_rejects_bad_world_size(world_size: object) -> None:
    message = (
        f"AlphaBeta(alpha=1.0, beta=1.0).bind(world_size={world_size!r}): world_size must be "
        "an int >= 1; pass the number of world ranks"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        AlphaBeta(alpha=1.0, beta=1.0).bind(world_size, random.Random(0))  # type: ignore[arg-type]


def test_models_accept_integers_and_store_floats() -> None:
    model = AlphaBeta(alpha=1, beta=0)
    assert (model.alpha, model.beta, model.gamma) == (1.0, 0.0, 0.0)
    assert type(model.alpha) is float


@pytest.mark.parametrize(
    ("model", "text"),
    [
        (Zero(), "Zero()"),
        (Constant(5e-06), "Constant(seconds=5e-06)"),
        (AlphaBeta(alpha=1e-06, beta=1e-10), "AlphaBeta(alpha=1e-06, beta=1e-10)"),
        (
            AlphaBeta(alpha=1e-06, beta=1e-10, gamma=1e-09),
            "AlphaBeta(alpha=1e-06, beta=1e-10, gamma=1e-09)",
        ),
        (LogGP(L=1e-06, o=1e-07, g=2e-07, G=1e-10), "LogGP(L=1e-06, o=1e-07, g=2e-07, G=1e-10)"),
        (
            Hierarchical(Constant(1.0), Zero(), ranks_per_node=4),
            "Hierarchical(intra=Constant(seconds=1.0), inter=Zero(), ranks_per_node=4)",
        ),
        (Jitter(Zero()), "Jitter(model=Zero(), rel=0.1)"),
    ],
)
def test_describe_is_short_and_is_the_repr(model: LatencyModel, text: str) -> None:
    assert model.describe() == text
    assert repr(model) == text


def test_models_compare_by_parameters_and_hash_alike() -> None:
    assert AlphaBeta(alpha=1e-6, beta=1e-10) == AlphaBeta(1e-6, 1e-10, 0.0)
    assert AlphaBeta(alpha=1e-6, beta=1e-10) != AlphaBeta(alpha=1e-6, beta=2e-10)
    assert Constant(1.0) != Zero()
    assert hash(Jitter(Zero(), rel=0.5)) == hash(Jitter(Zero(), rel=0.5))


def test_models_are_immutable() -> None:
    model = AlphaBeta(alpha=1e-6, beta=1e-10)
    message = r"^AlphaBeta is immutable; build a new model instead$"
    with pytest.raises(AttributeError, match=message):
        model.alpha = 2e-6


def test_ports_repr_names_model_and_world_size() -> None:
    ports = bind(AlphaBeta(alpha=1e-06, beta=1e-10), world_size=3)
    assert repr(ports) == "<ports of AlphaBeta(alpha=1e-06, beta=1e-10) world_size=3>"


# ---- the built-in ports and subclasses of Ports ----


@pytest.mark.parametrize("model", [latency.Zero(), latency.Constant(1e-6), latency.AlphaBeta(1e-6, 1e-9),
                                   latency.LogGP(1e-6, 1e-7, 2e-7, 1e-9)], ids=repr)
def test_built_in_ports_are_ports(model: latency.LatencyModel) -> None:
    ports = model.bind(4, random.Random(0))
    assert isinstance(ports, latency.Ports)
    assert repr(ports) == f"<ports of {model.describe()} world_size=4>"
    halves = model.bind(4, random.Random(0))
    for t, nbytes in ((0.0, 8), (0.0, 1000), (3e-6, 0), (1e-6, 2.5)):  # the analytic model charges fractions
        whole = ports.transfer(0, 1, nbytes, t)
        depart, wire = halves.send_side(0, 1, nbytes, t)
        assert (depart, halves.recv_side(0, 1, nbytes, wire)) == whole


def test_a_python_subclass_of_ports_charges_a_run() -> None:
    class Doubling(latency.Ports):
        ordered = False

        def __init__(self) -> None:
            self.calls: list[tuple[int, int, int]] = []

        def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float]:
            self.calls.append((src, dst, nbytes))
            return t, t + 2e-6

    made: list[Doubling] = []

    class Model(latency.LatencyModel):
        def bind(self, world_size: int, rng: random.Random) -> latency.Ports:
            made.append(Doubling())
            return made[-1]

    async def main(comm: sc.Comm) -> float:
        if comm.rank == 0:
            await comm.send(7, dst=1)
        else:
            await comm.recv(src=0)
        return comm.now

    assert list(sc.run(main, world_size=2, latency=Model())) == [0.0, 2e-6]
    assert made[0].calls == [(0, 1, 1)]
