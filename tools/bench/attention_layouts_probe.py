#!/usr/bin/env python3
"""The shared-prompt attention layouts of the trainer's passes, one layer at B3's micro-batch shape (GPU only).

Today's layout (the prefix grouper, decoder_model.cc PackedAttention): each sample's row holds its prompt and its
response, queries gathered into the rows and the output gathered back, cuDNN's causal kernel over the buckets. The
alternative timed here: one variable-length flash attention call whose sequences are each prompt (queries = keys) and
each response (queries = the response, keys = prompt + response), causal aligned at the bottom right for unequal
lengths, so queries and output stay in the packed order and only the two KV heads are gathered. Checks that alignment
against SDPA over [prompt + response] and times forward and forward + backward of both, and one q-sized gather.

  python3 tools/bench/attention_layouts_probe.py      # on the GPU machine (python3 with torch); OUT=dir for JSON
"""
import json
import os
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.manual_seed(0)
dev = 'cuda'
dt = torch.bfloat16
H, KV, D = 14, 2, 64
P, R, N, G = 256, 512, 8, 5          # prompt, response, samples a prompt, prompts a micro-batch (~21.8k tokens)
scale = D ** -0.5


def timeit(f, iters=20):
    """Milliseconds per call of f, the mean of `iters` after three warm-up calls."""
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        f()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters * 1e3


# Packed tokens: per group [prompt | r1 | ... | r8]
T = G * (P + N * R)
q = torch.randn(T, H, D, device=dev, dtype=dt)
k = torch.randn(T, KV, D, device=dev, dtype=dt)
v = torch.randn(T, KV, D, device=dev, dtype=dt)
# varlen: sequences prompt (q=k=prompt) and each response (q=response, k=prompt+response)
cq, ck, kidx = [0], [0], []
for g in range(G):
    base = g * (P + N * R)
    cq.append(cq[-1] + P)
    ck.append(ck[-1] + P)
    kidx += list(range(base, base + P))
    for i in range(N):
        r0 = base + P + i * R
        cq.append(cq[-1] + R)
        ck.append(ck[-1] + P + R)
        kidx += list(range(base, base + P)) + list(range(r0, r0 + R))
cq = torch.tensor(cq, device=dev, dtype=torch.int32)
ck = torch.tensor(ck, device=dev, dtype=torch.int32)
kidx = torch.tensor(kidx, device=dev)
kv_k, kv_v = k[kidx].contiguous(), v[kidx].contiguous()
out = {}
def flash_fwd():
    return torch.ops.aten._flash_attention_forward(q, kv_k, kv_v, cq, ck, R, P + R, 0.0, True, False, scale=scale)
o, lse, seed, off, _ = flash_fwd()
# The alignment: response 3 of group 0 against SDPA over [prompt + response] (top-left causal, equal lengths).
g0 = torch.cat([torch.arange(0, P), torch.arange(P + 3 * R, P + 4 * R)]).to(dev)
ref = F.scaled_dot_product_attention(q[g0].transpose(0, 1)[None], k[g0].transpose(0, 1)[None],
                                     v[g0].transpose(0, 1)[None],
                                     is_causal=True, enable_gqa=True, scale=scale)[0].transpose(0, 1)
got = o[P + 3 * R:P + 4 * R]
out['bottom_right_max_err_resp'] = (got.float() - ref[P:].float()).abs().max().item()
out['bottom_right_max_err_prompt'] = (o[:P].float() - ref[:P].float()).abs().max().item()
go = torch.randn_like(o)
def flash_fb():
    o, lse, seed, off, _ = flash_fwd()
    return torch.ops.aten._flash_attention_backward(go, q, kv_k, kv_v, o, lse, cq, ck, R, P + R, 0.0, True, seed, off,
                                                    scale=scale)
out['flash_varlen_fwd_ms'] = timeit(lambda: flash_fwd())
out['flash_varlen_fwd_bwd_ms'] = timeit(flash_fb)
# cuDNN on the bucketed rows (today's layout): G * N rows of [prompt + response].
rows = G * N
idx = []
for g in range(G):
    base = g * (P + N * R)
    for i in range(N):
        idx += list(range(base, base + P)) + list(range(base + P + i * R, base + P + (i + 1) * R))
idx = torch.tensor(idx, device=dev)
qb = q[idx].view(rows, P + R, H, D).transpose(1, 2).contiguous().requires_grad_()
kb = k[idx].view(rows, P + R, KV, D).transpose(1, 2).contiguous().requires_grad_()
vb = v[idx].view(rows, P + R, KV, D).transpose(1, 2).contiguous().requires_grad_()
gb = torch.randn(rows, H, P + R, D, device=dev, dtype=dt)
def cudnn_fwd():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.no_grad():
        return F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, enable_gqa=True, scale=scale)
try:
    cudnn_fwd()
except Exception as e:
    out['cudnn_gqa_error'] = str(e)[:300]
    kb = kb.detach().repeat_interleave(H // KV, 1).requires_grad_()
    vb = vb.detach().repeat_interleave(H // KV, 1).requires_grad_()
def cudnn_fb():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, enable_gqa=True, scale=scale)
    return torch.autograd.grad(o, (qb, kb, vb), gb)
out['cudnn_buckets_fwd_ms'] = timeit(cudnn_fwd)
out['cudnn_buckets_fwd_bwd_ms'] = timeit(cudnn_fb)
# the q-sized moves today's layout adds per layer and pass: a gather of q rows and one of the output (bf16)
out['q_gather_ms'] = timeit(lambda: q[idx])
out['tokens'] = T
out['rows'] = rows
print(json.dumps(out, indent=1))
if os.environ.get('OUT'):
    json.dump(out, open(os.path.join(os.environ['OUT'], 'attention_layouts.json'), 'w'), indent=1)
