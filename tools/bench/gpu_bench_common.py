"""What the GPU benchmarks B1-B3 (b1_rollout.py, b2_update.py, b3_grpo.py) share: the bench-0.5b model of
BENCHMARKS.md, and the commit and machine a result file records."""
import os
import platform
import subprocess
import tempfile


def make_bench_model(bin_dir, out_dir):
    """bench-0.5b: the Qwen2.5-0.5B shape (hidden 896, 24 layers, 14 query / 2 KV heads, intermediate 4864, vocab
    151936, rope theta 1e6, tied embeddings) with random weights, written by verl-make-tiny-model as an HF directory
    (with its small byte-level tokenizer). Returns out_dir."""
    subprocess.run([os.path.join(bin_dir, "verl-make-tiny-model"), "--out-dir", out_dir, "--hidden", "896", "--layers",
                    "24", "--heads", "14", "--kv-heads", "2", "--intermediate", "4864", "--vocab-size", "151936",
                    "--rope-theta", "1000000"], check=True, stdout=subprocess.DEVNULL)
    return out_dir


def _git(*args, env=None):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, env=env).stdout.strip()


def provenance():
    """{"commit", "tree"} of a result file. tree: the hash of the tree that runs, every file git does not ignore as it
    stands (through an index of its own), which `git log --format='%H %T'` lists beside the commit that has these
    files, so that the commit named can be checked. commit: VERL_COMMIT when set (pass the hash taken on your machine:
    the device copy's .git may be stale); else HEAD, or "<HEAD>-dirty (tree <hash>)" where the files differ from
    HEAD's (as on a device copy of a newer tree over a stale .git)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, GIT_INDEX_FILE=os.path.join(d, "index"))
        _git("add", "-A", env=env)
        tree = _git("write-tree", env=env)
    commit = os.environ.get("VERL_COMMIT")
    if not commit:
        commit = _git("rev-parse", "HEAD")
        if tree and tree != _git("rev-parse", "HEAD^{tree}"):
            commit = "%s-dirty (tree %s)" % (commit, tree)
    return {"commit": commit, "tree": tree}


def machine():
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip().splitlines()
    except FileNotFoundError:  # no NVIDIA driver here
        gpu = []
    # The host's CPU model: HF generate's time depends on it (its decoding launches its kernels one by one from Python;
    # HF's B1 time moved between 6.7 and 15.7 s over the GPU machines lent, ours by under 2 %).
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"gpu": gpu[:1], "cpus": os.cpu_count(), "cpu_model": cpu, "platform": platform.platform()}
