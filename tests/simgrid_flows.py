"""Run a platform's flows, or a ring all_reduce on it, under SimGrid; print the times as JSON.

Run by ``tests/test_platforms_simgrid.py`` with a Python that has SimGrid's
bindings (Debian's ``python3-simgrid``), never imported by the tests
themselves. Usage: ``python3 simgrid_flows.py DESCRIPTION.json``, where the
description holds SimGrid's ``config`` options, the number of ``hosts``
(one per rank), the ``links`` as ``[latency s, bandwidth B/s]`` (each one
direction of a cable), the ``routes`` as ``[[src, dst], [link, ...]]``, and
either ``flows`` (``[src, dst, bytes, start]``: prints when each was
received; with ``changes``, ``[time, link, bandwidth B/s]``, a link's
bandwidth changes at a time) or ``ring`` (``{"ranks": p, "chunk": bytes}``: a ring all_reduce,
``2 * (p - 1)`` steps of sending ``chunk`` bytes right while receiving from
the left; prints when each rank finished).
"""

import json
import sys

import simgrid


def platform_xml(desc: dict) -> str:
    xml = ['<?xml version="1.0"?>', '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
           '<platform version="4.1">', '<zone id="world" routing="Full">']
    xml += [f'<host id="h{h}" speed="1Gf"/>' for h in range(desc["hosts"])]
    xml += [f'<link id="l{i}" bandwidth="{bw!r}Bps" latency="{lat!r}s"/>'
            for i, (lat, bw) in enumerate(desc["links"])]
    for (src, dst), route in desc["routes"]:
        xml.append(f'<route src="h{src}" dst="h{dst}" symmetrical="NO">'
                   + "".join(f'<link_ctn id="l{i}"/>' for i in route) + "</route>")
    xml += ["</zone>", "</platform>"]
    return "\n".join(xml)


def main(path: str) -> None:
    desc = json.load(open(path))
    engine = simgrid.Engine(["simgrid_flows"] + [f"--cfg={c}" for c in desc["config"]]
                            + ["--log=root.thres:critical"])
    with open(path + ".xml", "w") as f:
        f.write(platform_xml(desc))
    engine.load_platform(path + ".xml")
    done = {}

    def sender(i, size, start):
        simgrid.this_actor.sleep_until(start)
        simgrid.Mailbox.by_name(f"flow {i}").put(i, size)

    def receiver(i):
        simgrid.Mailbox.by_name(f"flow {i}").get()
        done[i] = simgrid.Engine.clock

    def change(at, link, bandwidth):
        simgrid.this_actor.sleep_until(at)
        simgrid.Link.by_name(f"l{link}").set_bandwidth(bandwidth)

    def ring_rank(rank, ranks, chunk):
        right = simgrid.Mailbox.by_name(f"to {(rank + 1) % ranks}")
        mine = simgrid.Mailbox.by_name(f"to {rank}")
        for _ in range(2 * (ranks - 1)):
            sent = right.put_async(rank, chunk)
            mine.get()
            sent.wait()
        done[rank] = simgrid.Engine.clock

    if "ring" in desc:
        ranks, chunk = desc["ring"]["ranks"], desc["ring"]["chunk"]
        for r in range(ranks):
            simgrid.Actor.create(f"rank {r}", simgrid.Host.by_name(f"h{r}"), ring_rank, r, ranks, chunk)
        count = ranks
    else:
        for i, (src, dst, size, start) in enumerate(desc["flows"]):
            simgrid.Actor.create(f"send {i}", simgrid.Host.by_name(f"h{src}"), sender, i, size, start)
            simgrid.Actor.create(f"recv {i}", simgrid.Host.by_name(f"h{dst}"), receiver, i)
        count = len(desc["flows"])
        for at, link, bandwidth in desc.get("changes", ()):
            simgrid.Actor.create(f"change l{link}", simgrid.Host.by_name("h0"), change, at, link, bandwidth)
    engine.run()
    print(json.dumps([done[i] for i in range(count)]))


if __name__ == "__main__":
    main(sys.argv[1])
