#!/usr/bin/env bash
# Runs THERE (nvidia-h200-x2): the controller's abort relay over NCCL. Two GPU workers started by hand, one GPU each
# (as on two nodes), run GRPO on the tiny model as an NCCL group; worker b is SIGSTOPped mid-run. The controller's
# heartbeat notices, cancels the calls and relays the failure (AbortCommunicator), and worker a's NCCL communicator is
# aborted (OnPeerAborted) while b is still stopped, although collectives and RPCs may wait 600 s. Then b is replaced at
# its address and the job finishes. Writes $OUT/nccl_relay.txt (and the logs).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-$ROOT/build-cuda/out}"
mkdir -p "$OUT"
. "$ROOT/tools/device/build.sh" --env-only
set +e
"$ROOT/tools/device/build.sh" verl-worker verl-controller verl-make-tiny-model verl-make-dataset > "$OUT/build.log" 2>&1 ||
  { echo "build failed"; tail -20 "$OUT/build.log"; exit 1; }
B="$ROOT/build-cuda/bin"
W="$(mktemp -d)"
"$B/verl-make-tiny-model" --out-dir "$W/model" > /dev/null
"$B/verl-make-dataset" --task repeat_letter --out-dir "$W/data" --train-size 256 --val-size 16 > /dev/null
now() { date +%s.%N; }
start_worker() {  # id gpu listen
  CUDA_VISIBLE_DEVICES=$2 "$B/verl-worker" --listen "$3" --ready-file "$W/$1.ready" --worker-id "$1" --device cuda \
    > "$W/$1.log" 2>&1 &
  echo $!
}
wait_file() { for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }
a=$(start_worker a 0 127.0.0.1:0); b=$(start_worker b 1 127.0.0.1:0)
wait_file "$W/a.ready" && wait_file "$W/b.ready" || { echo "workers did not start"; cat "$W"/*.log; exit 1; }
A=$(cat "$W/a.ready"); BA=$(cat "$W/b.ready")
"$B/verl-controller" --config "$ROOT/configs/quickstart.yaml" actor_rollout_ref.model.path="$W/model" \
  data.train_files="$W/data/train.parquet" data.val_files="$W/data/test.parquet" trainer.log_dir="$W/logs" \
  trainer.default_local_dir="$W/ckpt" trainer.total_training_steps=150 trainer.save_freq=4 trainer.test_freq=1000 \
  "trainer.logger=[jsonl]" trainer.device=cuda trainer.nnodes=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 \
  "cluster.worker_addresses=[$A,$BA]" cluster.heartbeat_interval_s=0.5 cluster.heartbeat_timeout_s=2 \
  cluster.comm_timeout_s=600 cluster.rpc_timeout_s=600 cluster.max_worker_restarts=1 \
  cluster.worker_replacement_timeout_s=120 > "$W/controller.log" 2>&1 &
ctl=$!
for _ in $(seq 600); do grep -q '"step":6,' "$W/logs/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
kill -STOP "$b"; t0=$(now)
released=no
for _ in $(seq 600); do grep -q "aborting its communicator" "$W/a.log" && { released=yes; break; }; sleep 0.1; done
t1=$(now)
sleep 1  # a's rank thread returns from the aborted collective
kill -KILL "$b"; wait "$b" 2>/dev/null
b2=$(start_worker b2 1 "$BA")
for _ in $(seq 3000); do kill -0 "$ctl" 2>/dev/null || break; sleep 0.1; done
wait "$ctl"; rc=$?
steps=$(grep -c '"step"' "$W/logs/metrics.jsonl")
{
  echo "backend: $(grep -o 'formed in [0-9.]* s ([a-z]* backend)' "$W/controller.log" | head -1)"
  echo "released while b was stopped: $released, $(python3 -c "print(round($t1 - $t0, 2))") s after SIGSTOP"
  echo "controller exit: $rc; metrics records: $steps (151 expected: step 0 + 150)"
  echo "--- worker a (the survivor):"; grep -E "aborting|NCCL|rank 1|failed|error" "$W/a.log" | head -12
  echo "--- controller:"; grep -E "warn|error|waiting|answers|recovered|resumed|finished" "$W/controller.log" | head -20
} > "$OUT/nccl_relay.txt"
cp "$W/a.log" "$OUT/worker_a.log"; cp "$W/controller.log" "$OUT/controller.log"
cat "$OUT/nccl_relay.txt"
kill "$a" "$b2" 2>/dev/null
