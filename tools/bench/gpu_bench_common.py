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


def tree():
    """The hash of the tree that runs: every file git does not ignore, as it stands (through an index of its own), the
    hash `git log --format='%H %T'` lists beside the commit that has these files. A result file records it beside its
    commit, so that the commit it names can be checked."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, GIT_INDEX_FILE=os.path.join(d, "index"))
        _git("add", "-A", env=env)
        return _git("write-tree", env=env)


def commit():
    """VERL_COMMIT when set (pass the hash taken on your machine: the device copy's .git may be stale). Else HEAD, or,
    where the files differ from HEAD's (as on a device copy of a newer tree over a stale .git), "<HEAD>-dirty (tree
    <hash>)" (tree())."""
    if os.environ.get("VERL_COMMIT"):
        return os.environ["VERL_COMMIT"]
    head, ran = _git("rev-parse", "HEAD"), tree()
    if not ran or ran == _git("rev-parse", "HEAD^{tree}"):
        return head
    return "%s-dirty (tree %s)" % (head, ran)


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
