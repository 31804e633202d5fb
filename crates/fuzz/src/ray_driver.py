"""wirelab fuzz --ray: the campaign's runs as Ray tasks.

`wirelab fuzz` starts this driver (embedded in the binary) with the project's
virtualenv's Python and talks to it in JSON lines:

  stdout, first line   {"ready": true, "cpus": N, "nodes": M}
  stdin                {"id": 7, "spec": YAML, "label": "run-7", "seed": S}
  stdout               {"id": 7, "obs": {...}}      (an Observation)
  stdin                {"forget": DIR, "node": NODE_ID}
  stdin                {"cancel": true}              (Ctrl-C: stop every run)
  stdin closed         finish what runs, then exit

Each task runs one spec in a lab on its node with `wirelab fuzz-eval` (the
same code as a local campaign's runs) and returns its observation. Ray's own
scheduling places tasks; each asks for one CPU, as a local lab takes a core.

Why a driver process and not Ray's C++/Java API: Ray's supported driver
APIs are Python, Java and C++, and of those only Python is in the project's
toolchain; the Rust side keeps the campaign and this stays a thin bridge.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ADDRESS, WIRELAB, OUT, TIMEOUT = sys.argv[1:5]


@ray.remote(num_cpus=1, max_retries=0)
def run_spec(spec, label, seed):
    cmd = [WIRELAB, "fuzz-eval", "--label", label, "--seed", str(seed),
           "--out", OUT, "--timeout", TIMEOUT]
    # A session of its own: a signal to the worker's group does not reach
    # it, and it gets exactly one SIGINT on cancel (a second one would make
    # wirelab leave its lab).
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(spec)
    except BaseException:
        # ray.cancel raises KeyboardInterrupt here: wirelab stops the run
        # and removes its lab before the task ends.
        p.send_signal(signal.SIGINT)
        p.communicate()
        raise
    node = ray.get_runtime_context().get_node_id()
    if p.returncode != 0:
        tail = (err or "").strip().splitlines()[-3:]
        return {"verdict": "ERROR", "error": "wirelab fuzz-eval exited %d on node %s: %s"
                % (p.returncode, node, " / ".join(tail))}
    obs = json.loads(out)
    obs["node"] = node
    return obs


@ray.remote(num_cpus=0, max_retries=0)
def forget(path):
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def main():
    # Ctrl-C at a terminal reaches the whole process group: wirelab decides
    # what to cancel and tells this driver.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # ray.init retries an address where nothing listens for a long time;
    # say so at once.
    host, _, port = ADDRESS.rpartition(":")
    if not host or not port.isdigit():
        print("%r is not HOST:PORT (the head's address, as `ray start --head` prints it)"
              % ADDRESS, file=sys.stderr)
        sys.exit(2)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        print("nothing answers at %s (give the head's HOST:PORT, as `ray start --head` prints it): %s"
              % (ADDRESS, e), file=sys.stderr)
        sys.exit(2)
    try:
        ray.init(address=ADDRESS, logging_level="ERROR", log_to_driver=False,
                 configure_logging=False)
    except Exception as e:  # connection refused, no cluster there, ...
        print("cannot connect to the Ray cluster at %s: %s" % (ADDRESS, e), file=sys.stderr)
        sys.exit(2)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    emit({"ready": True, "cpus": cpus, "nodes": nodes})

    running = {}  # ObjectRef -> request id
    lock = threading.Condition()
    closed = [False]

    def read_requests():
        for line in sys.stdin:
            req = json.loads(line)
            with lock:
                if "spec" in req:
                    ref = run_spec.remote(req["spec"], req["label"], req["seed"])
                    running[ref] = req["id"]
                elif "forget" in req:
                    strategy = NodeAffinitySchedulingStrategy(req["node"], soft=False)
                    running[forget.options(scheduling_strategy=strategy).remote(req["forget"])] = None
                elif req.get("cancel"):
                    for ref, rid in running.items():
                        if rid is not None:
                            ray.cancel(ref)
                lock.notify()
        with lock:
            closed[0] = True
            lock.notify()

    threading.Thread(target=read_requests, daemon=True).start()
    while True:
        with lock:
            while not running and not closed[0]:
                lock.wait()
            if not running and closed[0]:
                break
            refs = list(running)
        done, _ = ray.wait(refs, num_returns=1, timeout=0.2)
        for ref in done:
            with lock:
                rid = running.pop(ref)
            try:
                obs = ray.get(ref)
            except ray.exceptions.TaskCancelledError:
                obs = {"verdict": "INTERRUPTED"}
            except Exception as e:  # the worker or its node died
                obs = {"verdict": "ERROR", "error": "the Ray task failed: %s" % e}
            if rid is not None:
                emit({"id": rid, "obs": obs})
    ray.shutdown()


out_lock = threading.Lock()


def emit(msg):
    with out_lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
