"""A fake campaign worker for tests/python/test_fuzz_runner.py (Campaign(worker_main=fake_worker)): it
speaks the runner's protocol (refgrad.fuzz.runner._worker_main) but imports neither torch nor refgrad, so
that it starts at once, and its cases and minimizations are made up:

- a case of seed s finds what CASES[s] says, at once;
- a minimization takes the campaign's whole --minimize-seconds, then writes minimized.py;
- it says its resident memory is RESIDENT_MIB after every case.
"""
import os
import time

RESIDENT_MIB = 100.0

# seed -> (the program's op count, its op kinds, its findings as (kind, engine, where, detail))
CASES = {
    # one bug, three op sets: three folders; seeds 2 and 3 have the fewest ops, 2 is the lower seed
    1: (9, ("add", "mul", "sin"), [("wrong_gradient", "fake", "MulBackward0", "gradients failing the rule: arg0")]),
    2: (4, ("mul", "sin"), [("wrong_gradient", "fake", "MulBackward0", "gradients failing the rule: arg1")]),
    3: (4, ("exp", "mul"), [("wrong_gradient", "fake", "MulBackward0", "gradients failing the rule: arg0")]),
    # two bugs that raise the same error type
    4: (5, ("index_add",), [("engine_raised", "fake", "InductorError",
                             "InductorError: AssertionError:  <- AssertionError: ")]),
    5: (5, ("div",), [("engine_raised", "fake", "InductorError",
                       "InductorError: TypeError: 'FloorDiv' object cannot be interpreted as an integer")]),
    # unlocalized wrong gradients: 6 and 8 say the same but for the leaves and counts, 7 something else
    6: (6, ("avg_pool2d",), [("wrong_gradient", "fake", "unlocalized",
                              "gradients failing the rule: arg1; first divergence: not localized: the engine ran "
                              "1 compiled backward(s) and none could be read: compiled backward 0 is compiled code")]),
    7: (6, ("index_add",), [("wrong_gradient", "fake", "unlocalized",
                             "gradients failing the rule: arg3; first divergence: not localized: the engine ran "
                             "1 compiled backward(s) and none could be read: compiled backward 0's graph has no "
                             "nodes with sequence numbers")]),
    8: (7, ("avg_pool2d", "sum"), [("wrong_gradient", "fake", "unlocalized",
                                    "gradients failing the rule: arg0, arg2; first divergence: not localized: the "
                                    "engine ran 2 compiled backward(s) and none could be read: compiled backward 1 "
                                    "is compiled code")]),
    # no finding
    9: (3, ("sin",), []),
}


def fake_worker(conn, config):
    conn.send(("ready",))
    while True:
        message = conn.recv()
        if message[0] == "stop":
            return
        if message[0] == "minimize":
            time.sleep(config["minimize_seconds"])
            with open(os.path.join(message[1], "minimized.py"), "w") as f:
                f.write("# minimized by the fake worker\n")
            conn.send(("minimized", message[1], "fake"))
            continue
        seed = message[1]
        op_count, ops, findings = CASES[seed]
        source = (f"# refgrad.fuzz case {seed} (generator version 0): {op_count} ops, 1 leaves, 1 outputs, "
                  f"float32: {', '.join(ops)}\n")
        conn.send(("result", seed, {
            "seed": seed, "version": 0, "ops": list(ops), "uncovered": [], "report": "", "reproducers": {},
            "source": source, "seconds": 0.0,
            "findings": [{"kind": kind, "engine": engine, "where": where, "ops": list(ops), "detail": detail}
                         for kind, engine, where, detail in findings]}, RESIDENT_MIB))
