"""Reads the TensorBoard event files of a real run back with the `tensorboard` package and checks every scalar
against the run's metrics.jsonl, and the validation generations (trainer.log_val_generations) as text.

Runs the CPU quickstart (shortened) with trainer.logger=[console,jsonl,tensorboard] in a temporary directory, then
loads <log_dir>/tensorboard with tensorboard's EventAccumulator (the reader TensorBoard's own server uses).

usage: tensorboard_read_test.py BUILD_DIR SOURCE_DIR     (run with the python of tools/test_python.sh)
Exit status 77 (CTest: skipped) when the tensorboard package is not importable.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as e:
    print(f"tensorboard not importable ({e}); run tools/test_python.sh. Skipped.")
    sys.exit(77)


def main():
    build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    bin_dir = os.path.join(build, "bin")
    work = tempfile.mkdtemp(prefix="verl_tb_")
    try:
        run = lambda *cmd: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        run(f"{bin_dir}/verl-make-tiny-model", "--out-dir", f"{work}/model")
        run(f"{bin_dir}/verl-make-dataset", "--task", "repeat_letter", "--out-dir", f"{work}/data")
        run(f"{bin_dir}/verl-controller", "--config", f"{source}/configs/quickstart.yaml",
            f"actor_rollout_ref.model.path={work}/model", f"data.train_files={work}/data/train.parquet",
            f"data.val_files={work}/data/test.parquet", f"trainer.default_local_dir={work}/ckpt",
            f"trainer.log_dir={work}/out", "trainer.total_training_steps=6", "trainer.test_freq=3",
            "trainer.save_freq=-1", "trainer.logger=[console,jsonl,tensorboard]", "trainer.log_val_generations=2")
        records = [json.loads(l) for l in open(f"{work}/out/metrics.jsonl") if l.strip()]
        expected = {}  # tag -> {step: value}
        for r in records:  # {"step": N, "data": {name: value}}
            for k, v in r["data"].items():
                expected.setdefault(k, {})[r["step"]] = float("nan") if v is None else float(v)
        acc = event_accumulator.EventAccumulator(f"{work}/out/tensorboard", size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        missing = sorted(set(expected) - tags)
        extra = sorted(tags - set(expected))
        assert not missing, f"tags missing from the event file: {missing}"
        assert not extra, f"tags in the event file that metrics.jsonl lacks: {extra}"
        checked = 0
        for tag, by_step in expected.items():
            got = {e.step: e.value for e in acc.Scalars(tag)}
            assert sorted(got) == sorted(by_step), f"{tag}: steps {sorted(got)} != {sorted(by_step)}"
            for step, want in by_step.items():
                # TensorBoard stores float32 scalars.
                assert math.isclose(got[step], want, rel_tol=1e-6, abs_tol=1e-30) or (
                    math.isnan(want) and math.isnan(got[step])), f"{tag} step {step}: {got[step]} != {want}"
                checked += 1
        assert "actor/pg_loss" in tags and "val-core/verl_cpp/repeat_letter/reward/mean@1" in tags
        val_steps = sorted(e.step for e in acc.Scalars("val-core/verl_cpp/repeat_letter/reward/mean@1"))
        assert val_steps == [0, 3, 6], val_steps
        # The validation generations: text for TensorBoard's text plugin at each validation, two samples each, the
        # same prompts every time (verl picks them by their inputs alone).
        assert acc.Tags()["tensors"] == ["val/generations"], acc.Tags()["tensors"]
        assert acc.SummaryMetadata("val/generations").plugin_data.plugin_name == "text"
        texts = {e.step: e.tensor_proto.string_val[0].decode() for e in acc.Tensors("val/generations")}
        assert sorted(texts) == [0, 3, 6], sorted(texts)
        inputs = []
        for step, text in sorted(texts.items()):
            assert text.startswith(f"**Generation Results - Step {step}**\n\n"), text[:80]
            assert "### Sample 2\n" in text and "### Sample 3" not in text, text
            assert text.count("**Score:** ") == 2, text
            inputs.append([part.split("\n\n")[0] for part in text.split("**Input:** ")[1:]])
        assert inputs[0] == inputs[1] == inputs[2] and len(inputs[0]) == 2, inputs
        print(f"ok: {len(tags)} tags, {checked} scalars equal to metrics.jsonl (float32), validation at {val_steps}, "
              f"its generations as text")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
