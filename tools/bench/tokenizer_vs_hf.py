#!/usr/bin/env python3
"""Tokenizer encode throughput, verl-cpp's Tokenizer against HuggingFace `tokenizers` (BENCHMARKS.md B0).

    python3 tools/bench/tokenizer_vs_hf.py [--build-dir build] [--merges 8000] [--min-seconds 1] [--out FILE]

Steps: (1) writes a corpus of >= 1 MB (the repository's own tracked docs and sources, plus generated lines of
digits, whitespace runs, CJK and emoji); (2) trains a byte-level BPE tokenizer.json with --merges merges using our
trainer (verl-bench-tokenizer --train-merges); (3) installs HF `tokenizers` into a venv under the build dir when it
is missing; (4) encodes the same corpus with the same tokenizer.json both ways, checks that the token ids are
identical, and writes docs/bench/tokenizer-<date>.json with the configuration, machine, commit and ratios ours/HF.

Modes: "whole" is one encode of the whole corpus; "lines" encodes each line ("\\n" kept) -- ours one Encode per line,
HF encode_batch over the lines (and encode_batch_fast, which skips offsets, as a second HF figure). Ours computes no
offsets or token strings; HF's Encoding objects carry both, which is part of what its figures pay for.
Ours is single-threaded; HF is measured single-threaded (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false) and, for
the batch calls, also multi-threaded (its default pool). Each measurement repeats the work for at least
--min-seconds (the first pass is reported separately as "cold") and is run --repeats times, keeping the fastest.
Needs: the verl-bench-tokenizer target built in --build-dir; network access to PyPI only when the venv is missing.
Exit status 0 when the ids match, 1 when they differ or a step fails.
"""

import argparse
import datetime
import json
import os
import platform
import random
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The HF side, run by the venv's python: argv = tokenizer.json corpus mode min_seconds ids_out.
HF_CHILD = r'''
import json, sys, time
import tokenizers
from tokenizers import Tokenizer
path, corpus_path, mode, min_seconds, ids_out = sys.argv[1:6]
min_seconds = float(min_seconds)
tok = Tokenizer.from_file(path)
with open(corpus_path, "rb") as f:
    text = f.read().decode("utf-8")
lines = text.split("\n")
lines = [l + "\n" for l in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
def one_pass():
    if mode == "whole":
        return [tok.encode(text).ids]
    if mode == "lines_fast":
        return [e.ids for e in tok.encode_batch_fast(lines)]
    return [e.ids for e in tok.encode_batch(lines)]
start = time.perf_counter()
first = one_pass()
cold = time.perf_counter() - start
iterations = 1
while time.perf_counter() - start < min_seconds:
    one_pass()
    iterations += 1
seconds = time.perf_counter() - start
tokens = sum(len(x) for x in first)
if ids_out:
    with open(ids_out, "w") as f:
        for ids in first:
            f.write(" ".join(map(str, ids)) + "\n")
nbytes = len(text.encode("utf-8"))
print(json.dumps({"tokens_per_s": tokens * iterations / seconds, "bytes_per_s": nbytes * iterations / seconds,
                  "mb": nbytes / 1e6, "vocab": tok.get_vocab_size(with_added_tokens=True), "tokens": tokens,
                  "mode": mode, "texts": len(first), "iterations": iterations, "seconds": seconds,
                  "cold_tokens_per_s": tokens / cold, "tokenizers_version": tokenizers.__version__}))
'''


def log(msg):
    print(f"[tokenizer_vs_hf] {msg}", file=sys.stderr, flush=True)


def make_corpus(path, min_bytes):
    """The repository's tracked text files (sorted, deterministic), then generated varied lines."""
    files = subprocess.run(["git", "-C", REPO, "ls-files"], check=True, capture_output=True, text=True).stdout.split()
    exts = (".md", ".cc", ".h", ".py", ".sh", ".txt", ".cmake", ".proto", ".yaml")
    parts = []
    for name in sorted(files):
        if not name.endswith(exts):
            continue
        try:
            with open(os.path.join(REPO, name), "rb") as f:
                parts.append(f.read().decode("utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    rng = random.Random(0)
    cjk = ["机器学习是人工智能的一个分支。", "強化学習で言語モデルを訓練する。", "오늘은 날씨가 좋습니다.",
           "数学题：一百二十三加四百五十六等于多少？", "東京と北京と서울"]
    emoji = ["🙂", "🚀", "👍🏽", "🇩🇪", "👩‍💻", "✅", "🔥🔥", "∑∫√", "e\u0301", "ﬁ"]
    words = ["the", "model", "reward", "policy", "gradient", "token", "batch", "worker", "rollout", "advantage"]
    generated = []
    for i in range(6000):
        kind = i % 6
        if kind == 0:
            generated.append(" ".join(str(rng.randrange(10 ** rng.randrange(1, 12))) for _ in range(8)))
        elif kind == 1:
            generated.append(" " * rng.randrange(1, 17) + rng.choice(words) + "\t" * rng.randrange(0, 3) +
                             " " * rng.randrange(0, 9) + "x = " + str(rng.random()))
        elif kind == 2:
            generated.append(rng.choice(cjk) + rng.choice(emoji) + " " + rng.choice(cjk))
        elif kind == 3:
            generated.append(" ".join(rng.choice(words).capitalize() if j == 0 else rng.choice(words)
                                      for j in range(rng.randrange(4, 20))) + rng.choice([".", "?", "!", "..."]))
        elif kind == 4:
            generated.append("".join(rng.choice(emoji) for _ in range(rng.randrange(1, 6))) + " done" +
                             "\n" * rng.randrange(0, 3))
        else:
            generated.append(f"{rng.choice(words)}_{i}({rng.randrange(100)}, \"{rng.choice(cjk)}\")  // 0x{i:08x}")
    text = "\n".join(parts) + "\n" + "\n".join(generated) + "\n"
    while len(text.encode("utf-8")) < min_bytes:
        text += "\n".join(generated) + "\n"
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    return len(text.encode("utf-8")), text.count("\n")


def ensure_venv(build_dir):
    venv = os.path.join(build_dir, "bench-venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        log(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    if subprocess.run([py, "-c", "import tokenizers"], capture_output=True).returncode != 0:
        log("installing tokenizers from PyPI into the venv")
        subprocess.run([py, "-m", "pip", "install", "-q", "tokenizers"], check=True)
    return py


def run_json(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:2])} failed (exit {r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def best_of(repeats, cmd, env=None):
    """Runs a measurement `repeats` times (the machine may be shared) and keeps the fastest, listing them all."""
    runs = [run_json(cmd, env) for _ in range(repeats)]
    best = max(runs, key=lambda r: r["tokens_per_s"])
    best["all_tokens_per_s"] = [r["tokens_per_s"] for r in runs]
    return best


def first_difference(a_path, b_path):
    """None when the two id files are identical, else a description of the first differing line/token."""
    with open(a_path) as a, open(b_path) as b:
        a_lines, b_lines = a.read().split("\n"), b.read().split("\n")
    if a_lines == b_lines:
        return None
    for i, (x, y) in enumerate(zip(a_lines, b_lines)):
        if x != y:
            xs, ys = x.split(), y.split()
            j = next((k for k, (p, q) in enumerate(zip(xs, ys)) if p != q), min(len(xs), len(ys)))
            return {"line": i, "token": j, "ours": xs[max(0, j - 3):j + 3], "hf": ys[max(0, j - 3):j + 3],
                    "ours_len": len(xs), "hf_len": len(ys)}
    return {"line_count_ours": len(a_lines), "line_count_hf": len(b_lines)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--merges", type=int, default=8000)
    ap.add_argument("--train-bytes", type=int, default=0, help="train on this many corpus bytes (0: all)")
    ap.add_argument("--min-bytes", type=int, default=1_100_000)
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement; the fastest is kept")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    build = os.path.abspath(args.build_dir)
    bench_bin = os.path.join(build, "bin", "verl-bench-tokenizer")
    if not os.path.exists(bench_bin):
        log(f"{bench_bin} not found: build it first (ninja -C {build} verl-bench-tokenizer)")
        return 1
    work = os.path.join(build, "bench", "tokenizer")
    os.makedirs(work, exist_ok=True)
    corpus = os.path.join(work, "corpus.txt")
    tok_json = os.path.join(work, f"tokenizer-{args.merges}.json")

    nbytes, nlines = make_corpus(corpus, args.min_bytes)
    log(f"corpus {corpus}: {nbytes} bytes, {nlines} lines")
    train_cmd = [bench_bin, "--train-merges", str(args.merges), "--corpus", corpus, "--out", tok_json]
    if args.train_bytes:
        train_cmd += ["--train-bytes", str(args.train_bytes)]
    t0 = datetime.datetime.now()
    train = run_json(train_cmd)
    train_seconds = (datetime.datetime.now() - t0).total_seconds()
    log(f"trained {tok_json} in {train_seconds:.1f} s")
    py = ensure_venv(build)

    single = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    multi = {k: v for k, v in os.environ.items() if k not in ("RAYON_NUM_THREADS",)}
    multi["TOKENIZERS_PARALLELISM"] = "true"
    results, identical, mismatches = {}, {}, {}
    for mode in ("whole", "lines"):
        ours_ids, hf_ids = os.path.join(work, f"ours-{mode}.ids"), os.path.join(work, f"hf-{mode}.ids")
        ours = best_of(args.repeats, [bench_bin, "--tokenizer", tok_json, "--corpus", corpus, "--mode", mode,
                         "--min-seconds", str(args.min_seconds), "--ids-out", ours_ids])
        hf = best_of(args.repeats, [py, "-c", HF_CHILD, tok_json, corpus, mode, str(args.min_seconds), hf_ids],
                     env=single)
        results[f"ours_{mode}"] = ours
        results[f"hf_{mode}_1thread"] = hf
        diff = first_difference(ours_ids, hf_ids)
        identical[mode] = diff is None
        if diff is not None:
            mismatches[mode] = diff
        log(f"{mode}: ours {ours['tokens_per_s']:.0f} tok/s, HF (1 thread) {hf['tokens_per_s']:.0f} tok/s, "
            f"ids identical: {diff is None}")
    fast_ids = os.path.join(work, "hf-lines_fast.ids")
    results["hf_lines_fast_1thread"] = best_of(args.repeats, [py, "-c", HF_CHILD, tok_json, corpus, "lines_fast",
                                                              str(args.min_seconds), fast_ids], env=single)
    identical["lines_hf_encode_batch_fast"] = first_difference(os.path.join(work, "ours-lines.ids"), fast_ids) is None
    results["hf_lines_multithread"] = best_of(args.repeats, [py, "-c", HF_CHILD, tok_json, corpus, "lines",
                                                             str(args.min_seconds), ""], env=multi)
    results["hf_lines_fast_multithread"] = best_of(args.repeats, [py, "-c", HF_CHILD, tok_json, corpus, "lines_fast",
                                                                  str(args.min_seconds), ""], env=multi)
    log(f"lines: HF encode_batch multi-threaded {results['hf_lines_multithread']['tokens_per_s']:.0f} tok/s")

    def ratio(a, b):
        return results[a]["tokens_per_s"] / results[b]["tokens_per_s"]

    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip() != ""
    now = datetime.datetime.now(datetime.timezone.utc)
    report = {
        "benchmark": "B0 tokenizer encode throughput: verl-cpp Tokenizer vs HuggingFace tokenizers",
        "date_utc": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit, "worktree_dirty": dirty,
        "machine": {"nproc": os.cpu_count(), "cpu_model": cpu, "platform": platform.platform(),
                    "python": platform.python_version(), "loadavg_1_5_15": list(os.getloadavg())},
        "config": {"corpus_bytes": nbytes, "corpus_lines": nlines,
                   "corpus": "repo tracked docs/sources (sorted) + generated digits, whitespace runs, CJK, emoji",
                   "merges": args.merges, "train": train, "train_seconds": train_seconds,
                   "vocab": results["ours_whole"]["vocab"], "min_seconds": args.min_seconds,
                   "repeats": args.repeats, "ours_threads": 1, "hf_single_thread_env": "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false",
                   "tokenizers_version": results["hf_whole_1thread"]["tokenizers_version"]},
        "ids_identical": identical, "mismatches": mismatches,
        "results": results,
        "ratio_ours_over_hf": {
            "whole_vs_hf_encode_1thread": ratio("ours_whole", "hf_whole_1thread"),
            "lines_vs_hf_encode_batch_1thread": ratio("ours_lines", "hf_lines_1thread"),
            "lines_vs_hf_encode_batch_fast_1thread": ratio("ours_lines", "hf_lines_fast_1thread"),
            "lines_vs_hf_encode_batch_multithread": ratio("ours_lines", "hf_lines_multithread"),
            "lines_vs_hf_encode_batch_fast_multithread": ratio("ours_lines", "hf_lines_fast_multithread"),
        },
    }
    out = args.out or os.path.join(REPO, "docs", "bench", f"tokenizer-{now.strftime('%Y-%m-%d')}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    log(f"wrote {out}")
    print(json.dumps(report["ratio_ours_over_hf"]))
    return 0 if all(identical.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
