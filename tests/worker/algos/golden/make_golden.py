#!/usr/bin/env python3
"""Writes the golden JSON files that tests/worker/algos/*_test.cc compare verl-cpp's algorithms against.

Every formula here is a float64 numpy transcription of verl's own Python (verl 0.8.0.dev, commit b178a3cd,
verl/trainer/ppo/core_algos.py, verl/trainer/ppo/ray_trainer.py:apply_kl_penalty, verl/utils/torch_functional.py),
written independently of the C++ so the test compares two implementations. Inputs are fixed random draws (seeded).

Usage (numpy only; CI just reads the JSON files):
  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy
  /tmp/venv/bin/python tests/worker/algos/golden/make_golden.py
"""

import json
import math
import os
from collections import defaultdict

import numpy as np

OUT_DIR = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------------------------------------------------
# verl/utils/torch_functional.py


def masked_sum(values, mask, axis=None):
    return (np.where(mask != 0, values, 0.0) * mask).sum(axis=axis)


def masked_mean(values, mask, axis=None):
    return masked_sum(values, mask, axis) / (mask.sum(axis=axis) + 1e-8)


def masked_var(values, mask):
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    mask_sum = mask.sum()
    assert mask_sum > 1
    return variance * (mask_sum / (mask_sum - 1))


def masked_whiten(values, mask):
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    return (values - mean) / np.sqrt(var + 1e-8)


# ---------------------------------------------------------------------------------------------------------------------
# Advantage estimators (core_algos.py)


def groups_of(index):
    g = defaultdict(list)
    for i, idx in enumerate(index):
        g[idx].append(i)
    return g


def gae(rewards, values, mask, gamma, lam):
    n, r = rewards.shape
    nextvalues = np.zeros(n)
    lastgaelam = np.zeros(n)
    adv = np.zeros((n, r))
    for t in reversed(range(r)):
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * mask[:, t] + (1 - mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * mask[:, t] + (1 - mask[:, t]) * lastgaelam
        adv[:, t] = lastgaelam
    returns = adv + values
    return masked_whiten(adv, mask), returns


def grpo(rewards, mask, index, norm_by_std, eps=1e-6):
    scores = rewards.sum(-1)
    out = scores.copy()
    for rows in groups_of(index).values():
        s = scores[rows]
        mean, std = (0.0, 1.0) if len(rows) == 1 else (s.mean(), s.std(ddof=1))
        out[rows] = (s - mean) / (std + eps) if norm_by_std else s - mean
    a = out[:, None] * mask
    return a, a


def grpo_passk(rewards, mask, index, norm_by_std, eps=1e-6):
    scores = rewards.sum(-1)
    adv = np.zeros_like(scores)
    for rows in groups_of(index).values():
        s = scores[rows]
        assert len(rows) >= 2
        order = np.argsort(-s, kind="stable")
        a = s[order[0]] - s[order[1]]
        if norm_by_std:
            a = a / (s.std(ddof=1) + eps)
        adv[rows[order[0]]] = a
    a = adv[:, None] * mask
    return a, a


def rloo(rewards, mask, index):
    scores = rewards.sum(-1)
    out = scores.copy()
    for rows in groups_of(index).values():
        n = len(rows)
        if n > 1:
            mean = scores[rows].mean()
            out[rows] = scores[rows] * n / (n - 1) - mean * n / (n - 1)
    a = out[:, None] * mask
    return a, a


def grpo_vectorized(rewards, mask, index, norm_by_std, eps=1e-6):
    # verl's group_mean_std: one-pass sums, the variance floored at eps under the root; a group of one: mean 0, std 1.
    scores = rewards.sum(-1)
    out = scores.copy()
    for rows in groups_of(index).values():
        s = scores[rows]
        c = len(rows)
        if c <= 1:
            mean, std = 0.0, 1.0
        else:
            s1, s2 = s.sum(), (s * s).sum()
            mean = s1 / c
            std = math.sqrt(max((s2 - s1 * s1 / c) / max(c - 1, 1), eps))
        out[rows] = (s - mean) / (std + eps) if norm_by_std else s - mean
    a = out[:, None] * mask
    return a, a


def rloo_vectorized(rewards, mask, index):
    # (c * s - sum) / max(c - 1, 1), and 0 for a group of one (where rloo keeps the score).
    scores = rewards.sum(-1)
    out = np.zeros_like(scores)
    for rows in groups_of(index).values():
        c = len(rows)
        if c > 1:
            out[rows] = (c * scores[rows] - scores[rows].sum()) / (c - 1)
    a = out[:, None] * mask
    return a, a


def opo(rewards, mask, index):
    lengths = mask.sum(-1)
    scores = rewards.sum(-1)
    out = scores.copy()
    for rows in groups_of(index).values():
        bsl = 0.0 if len(rows) == 1 else (lengths[rows] * scores[rows]).sum() / lengths[rows].sum()
        out[rows] = scores[rows] - bsl
    a = out[:, None] * mask
    return a, a


def reinforce_pp(rewards, mask, gamma):
    n, r = rewards.shape
    returns = np.zeros((n, r))
    running = np.zeros(n)
    for t in reversed(range(r)):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * mask[:, t]
    return masked_whiten(returns, mask) * mask, returns


def reinforce_pp_baseline(rewards, mask, index):
    scores = rewards.sum(-1)
    out = scores.copy()
    for rows in groups_of(index).values():
        mean = 0.0 if len(rows) == 1 else scores[rows].mean()
        out[rows] = scores[rows] - mean
    a = np.tile(out[:, None], (1, rewards.shape[1])) * mask
    a = masked_whiten(a, mask) * mask
    return a, a


def remax(rewards, baselines, mask):
    returns = np.flip(np.cumsum(np.flip(rewards * mask, -1), -1), -1)
    return returns - baselines[:, None] * mask, returns


def gpg(rewards, mask, index):
    scores = rewards.sum(-1)
    bsz = len(scores)
    alpha = bsz / max(np.count_nonzero(scores), 1)
    out = scores.copy()
    for rows in groups_of(index).values():
        mean = 0.0 if len(rows) == 1 else scores[rows].mean()
        out[rows] = alpha * (scores[rows] - mean) / 1.0
    a = out[:, None] * mask
    return a, a


# ---------------------------------------------------------------------------------------------------------------------
# agg_loss with verl's defaults (the whole mini-batch at once): returns the loss and d loss / d loss_mat.


def agg_loss(loss_mat, mask, mode):
    n, r = loss_mat.shape
    lens = mask.sum(-1)
    seq_valid = (lens > 0).astype(float)
    if mode == "token-mean":
        return masked_sum(loss_mat, mask) / mask.sum(), mask / mask.sum()
    if mode == "seq-mean-token-sum":
        seq = (loss_mat * mask).sum(-1)
        return masked_sum(seq, seq_valid) / seq_valid.sum(), mask * seq_valid[:, None] / seq_valid.sum()
    if mode == "seq-mean-token-mean":
        seq = (loss_mat * mask).sum(-1) / (lens + 1e-8)
        w = mask / (lens + 1e-8)[:, None] * seq_valid[:, None] / seq_valid.sum()
        return masked_sum(seq, seq_valid) / seq_valid.sum(), w
    if mode == "seq-mean-token-sum-norm":
        return (loss_mat * mask).sum() / r, mask / r
    raise ValueError(mode)


AGG_MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


# ---------------------------------------------------------------------------------------------------------------------
# Policy losses: per-token loss matrix, its derivative w.r.t. log_prob (elementwise; all modes are elementwise in
# log_prob once the stop-gradients are taken into account), the aggregation mode used, and the metrics.


def policy_loss_terms(mode, old, lp, adv, mask, cfg):
    lo, hi = cfg["clip_ratio_low"], cfg["clip_ratio_high"]
    zero = 0.0
    if mode == "vanilla":
        c = cfg["clip_ratio_c"]
        nkl_raw = lp - old
        nkl = np.clip(nkl_raw, -20.0, 20.0)
        dnkl = ((nkl_raw > -20.0) & (nkl_raw < 20.0)).astype(float)
        ratio = np.exp(nkl)
        l1 = -adv * ratio
        d1 = -adv * ratio * dnkl
        cr = np.clip(ratio, 1 - lo, 1 + hi)
        l2 = -adv * cr
        d2 = np.where((ratio > 1 - lo) & (ratio < 1 + hi), d1, 0.0)
        c1 = np.maximum(l1, l2)
        dc1 = np.where(l1 > l2, d1, np.where(l1 < l2, d2, 0.5 * (d1 + d2)))
        l3 = -adv * c
        c2 = np.minimum(l3, c1)
        dc2 = np.where(c1 < l3, dc1, 0.0)
        loss = np.where(adv < 0, c2, c1)
        dloss = np.where(adv < 0, dc2, dc1)
        metrics = dict(
            pg_clipfrac=masked_mean((l2 > l1).astype(float), mask),
            ppo_kl=masked_mean(-nkl, mask),
            pg_clipfrac_lower=masked_mean(((c1 > l3) & (adv < 0)).astype(float), mask),
        )
        return loss, dloss, None, metrics
    if mode == "gspo":
        nkl = lp - old
        seq_len = np.maximum(mask.sum(-1), 1)
        nkl_seq = (nkl * mask).sum(-1) / seq_len
        log_s = np.broadcast_to(nkl_seq[:, None], lp.shape)  # lp - sg(lp) is 0 in value
        dlog = (log_s < 10.0).astype(float)
        s = np.exp(np.minimum(log_s, 10.0))
        l1 = -adv * s
        d1 = -adv * s * dlog
        l2 = -adv * np.clip(s, 1 - lo, 1 + hi)
        d2 = np.where((s > 1 - lo) & (s < 1 + hi), d1, 0.0)
        loss = np.maximum(l1, l2)
        dloss = np.where(l1 > l2, d1, np.where(l1 < l2, d2, 0.5 * (d1 + d2)))
        metrics = dict(
            pg_clipfrac=masked_mean((l2 > l1).astype(float), mask),
            ppo_kl=masked_mean(-nkl, mask),
            pg_clipfrac_lower=zero,
        )
        return loss, dloss, "seq-mean-token-mean", metrics
    if mode == "gpg":
        return -lp * adv, -adv, None, dict(pg_clipfrac=zero, ppo_kl=zero, pg_clipfrac_lower=zero)
    if mode == "cispo":
        nkl = np.clip(lp - old, -20.0, 20.0)
        ratio = np.exp(nkl)
        cr = np.clip(ratio, 1 - lo, 1 + hi)
        loss = -cr * adv * lp
        metrics = dict(
            pg_clipfrac=masked_mean((ratio != cr).astype(float), mask),
            ppo_kl=masked_mean(-nkl, mask),
            pg_clipfrac_lower=zero,
        )
        return loss, -cr * adv, None, metrics
    if mode == "clip_cov":
        nkl = lp - old
        ratio = np.exp(nkl)
        l1 = -adv * ratio
        d1 = -adv * ratio
        l2 = -adv * np.clip(ratio, 1 - lo, 1 + hi)
        d2 = np.where((ratio > 1 - lo) & (ratio < 1 + hi), d1, 0.0)
        clip_by_origin = (l2 > l1) & (mask > 0)
        cov = (adv - masked_mean(adv, mask)) * (lp - masked_mean(lp, mask))
        cov[mask == 0] = -np.inf
        cov[clip_by_origin] = -np.inf
        clip_num = max(int(cfg["clip_cov_ratio"] * mask.sum()), 1)
        cand = np.argwhere((cov < cfg["clip_cov_ub"]) & (cov > cfg["clip_cov_lb"]) & (mask > 0))
        # The golden inputs keep the candidates within the budget, so verl's random pick takes all of them.
        assert len(cand) <= clip_num, (len(cand), clip_num)
        corr = np.ones_like(adv)
        for i, j in cand:
            corr[i, j] = 0
        loss = np.maximum(l1, l2) * corr
        dmax = np.where(l1 > l2, d1, np.where(l1 < l2, d2, 0.5 * (d1 + d2)))
        metrics = dict(
            pg_clipfrac=masked_mean((corr == 0).astype(float), mask),
            ppo_kl=masked_mean(-nkl, mask),
            pg_clipfrac_lower=zero,
        )
        return loss, dmax * corr, None, metrics, len(cand)
    if mode == "kl_cov":
        nkl = lp - old
        ratio = np.exp(nkl)
        l1 = -adv * ratio
        lkl = -adv * ratio + cfg["ppo_kl_coef"] * np.abs(nkl)
        valid = (mask > 0).reshape(-1)
        valid_idx = np.nonzero(valid)[0]
        a_v = adv.reshape(-1)[valid_idx]
        lp_v = lp.reshape(-1)[valid_idx]
        cov = (a_v - a_v.mean()) * (lp_v - lp_v.mean())
        k = max(1, int(len(cov) * cfg["kl_cov_ratio"]))
        top = np.argsort(-cov, kind="stable")[:k]
        assert cov[np.argsort(-cov)[k - 1]] > cov[np.argsort(-cov)[k]] + 1e-9  # no tie at the cut
        sel = np.zeros(adv.size, dtype=bool)
        sel[valid_idx[top]] = True
        sel = sel.reshape(adv.shape)
        loss = np.where(sel, lkl, l1)
        dloss = np.where(sel, -adv * ratio + cfg["ppo_kl_coef"] * np.sign(nkl), -adv * ratio)
        metrics = dict(pg_clipfrac=zero, ppo_kl=masked_mean(np.abs(nkl), mask), pg_clipfrac_lower=zero)
        return loss, dloss, None, metrics
    if mode == "sapo":
        nkl_raw = lp - old
        nkl = np.clip(nkl_raw, -20.0, 20.0)
        dnkl = ((nkl_raw > -20.0) & (nkl_raw < 20.0)).astype(float)
        ratio = np.exp(nkl)
        tau = np.where(adv > 0, cfg["tau_pos"], cfg["tau_neg"])
        sig = 1.0 / (1.0 + np.exp(-tau * (ratio - 1.0)))
        loss = -sig * (4.0 / tau) * adv
        dloss = -adv * 4.0 * sig * (1.0 - sig) * ratio * dnkl
        metrics = dict(pg_clipfrac=zero, ppo_kl=masked_mean(-nkl, mask), pg_clipfrac_lower=zero)
        return loss, dloss, "seq-mean-token-mean", metrics
    raise ValueError(mode)


def geo_mean_loss(old, lp, adv, mask, cfg, tis=None):
    """GMPO (compute_policy_loss_geo_mean): one term per sequence, -A_i exp(mean_t of the sign-clipped log ratio),
    averaged over every sequence of the mini-batch (torch.mean times verl's loss_scale_factor). Returns the loss, its
    gradient w.r.t. log_prob and the metrics."""
    lo, hi = cfg["clip_ratio_low"], cfg["clip_ratio_high"]
    n = lp.shape[0]
    nkl = lp - old
    sgn = np.sign(adv)
    c = np.clip(nkl, -lo, hi)
    x = sgn * np.minimum(sgn * nkl, sgn * c)
    # d x / d log_prob: 1 where the unclipped ratio is the one kept (both on ties, whose halves add up), else 0.
    dx = ((sgn != 0) & (sgn * nkl <= sgn * c)).astype(float)
    lens = mask.sum(-1) + 1e-8
    ratio = np.exp((x * mask).sum(-1) / lens)
    a_seq = (adv * mask).sum(-1) / lens
    seq = -a_seq * ratio
    if tis is not None:
        seq = seq * np.exp((np.log(tis + 1e-10) * mask).sum(-1) / lens)
    grad = (seq / lens)[:, None] * mask * dx / n
    clipped = nkl != c
    metrics = dict(
        pg_clipfrac=masked_mean((clipped & (adv > 0)).astype(float), mask),
        ppo_kl=masked_mean(-nkl, mask),
        pg_clipfrac_lower=masked_mean((clipped & (adv < 0)).astype(float), mask),
    )
    return seq.sum() / n, grad, metrics


# ---------------------------------------------------------------------------------------------------------------------
# KL penalty (kl_penalty / kl_penalty_forward, with the documented "+" straight-through) and apply_kl_penalty.


def reinforce_loss(old, lp, adv, mask, agg, cfg, use_is):
    """compute_policy_loss_bypass_mode with loss_type=reinforce (core_algos.py, rollout_corr_helper.py): `old` holds
    the rollout's log-probs (bypass mode sets old_log_probs = rollout_log_probs); with rollout_is=token the weights
    min(exp(clip(lp - old, +-20)), threshold), detached, multiply -adv * lp."""
    w = np.minimum(np.exp(np.clip(lp - old, -20.0, 20.0)), cfg["reinforce_is_threshold"]) if use_is else 1.0
    loss, dagg = agg_loss(-adv * lp * w, mask, agg)
    metrics = dict(pg_clipfrac=0.0, ppo_kl=masked_mean(-(lp - old), mask), pg_clipfrac_lower=0.0)
    return loss, dagg * -adv * w, metrics


def offpolicy_metrics(lp, roll, mask):
    """rollout_corr_helper.compute_offpolicy_metrics(old_log_prob=lp, rollout_log_prob=roll, response_mask=mask), as
    verl's actor calls it per micro-batch with its current log-probs."""
    train_row = masked_mean(lp, mask, axis=-1)
    roll_row = masked_mean(roll, mask, axis=-1)
    log_ratio = lp - roll
    diff = roll_row - train_row
    rho = np.exp(np.clip(log_ratio, -20.0, 20.0))
    seq = np.clip(masked_sum(log_ratio, mask, axis=-1), -20.0, 20.0)
    return dict(
        training_ppl=np.exp(-train_row).mean(),
        training_log_ppl=(-train_row).mean(),
        kl=masked_mean(roll - lp, mask),
        k3_kl=masked_mean(np.exp(log_ratio) - log_ratio - 1, mask),
        rollout_ppl=np.exp(-roll_row).mean(),
        rollout_log_ppl=(-roll_row).mean(),
        log_ppl_diff=diff.mean(),
        log_ppl_abs_diff=np.abs(diff).mean(),
        log_ppl_diff_max=diff.max(),
        log_ppl_diff_min=diff.min(),
        ppl_ratio=np.exp(diff).mean(),
        chi2_token=masked_mean(rho**2, mask) - 1.0,
        chi2_seq=np.exp(2.0 * seq).mean() - 1.0,
    )


def kl_forward(lp, ref, kind):
    """Value and d value / d lp."""
    if kind in ("kl", "k1"):
        return lp - ref, np.ones_like(lp)
    if kind == "abs":
        return np.abs(lp - ref), np.sign(lp - ref)
    if kind in ("mse", "k2"):
        return 0.5 * (lp - ref) ** 2, lp - ref
    if kind in ("low_var_kl", "k3"):
        kl_raw = ref - lp
        kl = np.clip(kl_raw, -20, 20)
        dkl = -((kl_raw > -20) & (kl_raw < 20)).astype(float)
        kld = np.exp(kl) - kl - 1
        dkld = (np.exp(kl) - 1) * dkl
        return np.clip(kld, -10, 10), np.where((kld > -10) & (kld < 10), dkld, 0.0)
    raise ValueError(kind)


def kl_penalty(lp, ref, kind):
    if kind.endswith("+"):
        base = kind[:-1]
        value, _ = kl_forward(lp, ref, base)
        return value, lp - ref  # straight-through: the k2 gradient
    return kl_forward(lp, ref, kind)


KL_TYPES = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"]
KL_TYPES += [k + "+" for k in KL_TYPES]


def apply_kl_penalty(scores, old, ref, mask, beta, kind):
    kld, _ = kl_penalty(old, ref, kind)
    kld = kld * mask
    rewards = scores - beta * kld
    current_kl = masked_mean(kld, mask, axis=-1).mean()
    return rewards, current_kl


# ---------------------------------------------------------------------------------------------------------------------
# compute_value_loss


def value_loss(vpreds, returns, values, mask, cliprange, mode):
    clipped = np.maximum(np.minimum(vpreds, values + cliprange), values - cliprange)
    l1 = (vpreds - returns) ** 2
    l2 = (clipped - returns) ** 2
    loss, _ = agg_loss(np.maximum(l1, l2), mask, mode)
    return 0.5 * loss, masked_mean((l2 > l1).astype(float), mask)


# ---------------------------------------------------------------------------------------------------------------------
# Inputs and output


def lengths_to_mask(lengths, r, holes=()):
    m = np.zeros((len(lengths), r))
    for i, n in enumerate(lengths):
        m[i, :n] = 1
    for i, j in holes:  # observation tokens inside a response (multi-turn)
        m[i, j] = 0
    return m


def t(x):
    return np.asarray(x, dtype=float).tolist()


def write(name, obj):
    path = os.path.join(OUT_DIR, name)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def make_advantages(rng):
    n, r = 8, 6
    cases = []
    # Outcome rewards: the score at the last valid token; ties inside a group, zero scores, a group of one ("c").
    mask = lengths_to_mask([6, 4, 1, 3, 6, 2, 5, 6], r)
    scores = np.array([1.0, 0.0, 1.0, 0.5, 0.5, 2.0, -1.0, 0.0])
    outcome = np.zeros((n, r))
    for i in range(n):
        outcome[i, int(mask[i].sum()) - 1] = scores[i]
    # Dense rewards everywhere (also on padding, which the estimators must treat as verl does), a hole in row 1.
    mask2 = lengths_to_mask([6, 5, 2, 4, 6, 3, 1, 6], r, holes=[(1, 2)])
    dense = rng.normal(0, 1, size=(n, r)).round(4)
    for name, rewards, m in (("outcome", outcome, mask), ("dense", dense, mask2)):
        values = rng.normal(0, 1, size=(n, r)).round(4)
        baselines = rng.normal(0, 1, size=n).round(4)
        index = ["a", "a", "a", "b", "b", "c", "d", "d"]
        passk_index = ["a", "a", "a", "b", "b", "d", "d", "d"]
        gamma, lam = (1.0, 1.0) if name == "outcome" else (0.95, 0.9)
        expected = {}
        for norm in (True, False):
            tag = "norm" if norm else "nonorm"
            expected[f"grpo/{tag}"] = grpo(rewards, m, index, norm)
            expected[f"grpo_passk/{tag}"] = grpo_passk(rewards, m, passk_index, norm)
            expected[f"grpo_vectorized/{tag}"] = grpo_vectorized(rewards, m, index, norm)
        expected["gae"] = gae(rewards, values, m, gamma, lam)
        expected["rloo"] = rloo(rewards, m, index)
        expected["rloo_vectorized"] = rloo_vectorized(rewards, m, index)
        expected["opo"] = opo(rewards, m, index)
        expected["reinforce_plus_plus"] = reinforce_pp(rewards, m, gamma)
        expected["reinforce_plus_plus_baseline"] = reinforce_pp_baseline(rewards, m, index)
        expected["remax"] = remax(rewards, baselines, m)
        expected["gpg"] = gpg(rewards, m, index)
        cases.append(
            dict(
                name=name,
                token_level_rewards=t(rewards),
                response_mask=t(m),
                values=t(values),
                baseline_scores=t(baselines),
                group_ids=index,
                passk_group_ids=passk_index,
                gamma=gamma,
                lam=lam,
                epsilon=1e-6,
                expected={k: dict(advantages=t(a), returns=t(ret)) for k, (a, ret) in expected.items()},
            )
        )
    # Near ties (no random draws, so the files' other values stay as they were): groups whose variance is below
    # grpo_vectorized's floor of 1e-6, where it and grpo part ways, and a group of one (rloo keeps its score,
    # rloo_vectorized gives 0).
    mask3 = lengths_to_mask([4, 2, 3, 1, 4, 4, 2, 3], r)
    # Values exact in float32 (the test runs in float32 too): spreads of 2^-13 and 2^-12, variances ~1.5e-8 and 3e-8.
    near = np.array([1.0, 1.0 + 2.0**-13, 1.0 - 2.0**-13, 0.375, 0.375, 0.75, 0.25, 0.25 + 2.0**-12])
    rewards3 = np.zeros((n, r))
    for i in range(n):
        rewards3[i, int(mask3[i].sum()) - 1] = near[i]
    index3 = ["a", "a", "a", "b", "b", "c", "d", "d"]
    expected3 = {}
    for norm in (True, False):
        tag = "norm" if norm else "nonorm"
        expected3[f"grpo/{tag}"] = grpo(rewards3, mask3, index3, norm)
        expected3[f"grpo_vectorized/{tag}"] = grpo_vectorized(rewards3, mask3, index3, norm)
    expected3["rloo"] = rloo(rewards3, mask3, index3)
    expected3["rloo_vectorized"] = rloo_vectorized(rewards3, mask3, index3)
    cases.append(
        dict(
            name="near_ties",
            token_level_rewards=t(rewards3),
            response_mask=t(mask3),
            values=t(np.zeros((n, r))),
            baseline_scores=t(np.zeros(n)),
            group_ids=index3,
            passk_group_ids=index3,
            gamma=1.0,
            lam=1.0,
            epsilon=1e-6,
            expected={k: dict(advantages=t(a), returns=t(ret)) for k, (a, ret) in expected3.items()},
        )
    )
    wv = rng.normal(3, 2, size=(5, 7))
    wm = lengths_to_mask([7, 3, 0, 5, 1], 7)
    write(
        "advantages.json",
        dict(cases=cases, whiten=dict(values=t(wv), mask=t(wm), expected=t(masked_whiten(wv, wm)))),
    )


def make_losses(rng):
    n, r = 8, 6
    # Row 6 is fully masked (verl's seq-mean modes leave it out of the sequence count).
    mask = lengths_to_mask([6, 4, 1, 3, 6, 2, 0, 5], r, holes=[(4, 3)])
    old = -rng.uniform(0.1, 3.0, size=(n, r))
    lp = old + rng.normal(0, 0.3, size=(n, r))
    # Ratios beyond the dual-clip bound (3) and far below 1 - clip_ratio_low, on both advantage signs.
    lp[0, 1] = old[0, 1] + 1.5
    lp[1, 0] = old[1, 0] + 1.4
    lp[3, 2] = old[3, 2] - 1.2
    lp[7, 4] = old[7, 4] + 1.3
    seq_adv = np.array([1.2, -0.8, 0.5, -1.5, 0.0, 0.9, 0.3, -0.4])
    adv = seq_adv[:, None] + rng.normal(0, 0.1, size=(n, r)) * (np.arange(n) % 2 == 0)[:, None]
    rollout = old + rng.normal(0, 0.5, size=(n, r))
    cfg = dict(
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=3.0,
        clip_cov_ratio=0.5,
        clip_cov_lb=0.1,
        clip_cov_ub=0.5,
        kl_cov_ratio=0.2,
        ppo_kl_coef=0.1,
        tis_imp_ratio_cap=1.5,
        tau_pos=0.9,
        tau_neg=1.3,
        reinforce_is_threshold=1.2,
    )
    tis = np.minimum(np.exp(np.clip(old - rollout, -20, 20)), cfg["tis_imp_ratio_cap"])
    policy = []
    for mode in ["vanilla", "gspo", "gpg", "cispo", "clip_cov", "kl_cov", "sapo", "geo_mean", "reinforce"]:
        for agg in AGG_MODES:
            for use_tis in (False, True):
                if use_tis and agg != "token-mean":
                    continue
                if mode == "reinforce":  # "tis": its own IS weights
                    loss, grad, metrics = reinforce_loss(old, lp, adv, mask, agg, cfg, use_tis)
                    policy.append(dict(loss_mode=mode, loss_agg_mode=agg, tis=use_tis, pg_loss=float(loss),
                                       grad_log_prob=t(grad), **{k: float(v) for k, v in metrics.items()}))
                    continue
                if mode == "geo_mean":  # its own aggregation, whatever loss_agg_mode says
                    loss, grad, metrics = geo_mean_loss(old, lp, adv, mask, cfg, tis if use_tis else None)
                    policy.append(dict(loss_mode=mode, loss_agg_mode=agg, tis=use_tis, pg_loss=float(loss),
                                       grad_log_prob=t(grad), **{k: float(v) for k, v in metrics.items()}))
                    continue
                res = policy_loss_terms(mode, old, lp, adv, mask, cfg)
                loss_mat, dloss, forced, metrics = res[:4]
                if mode == "clip_cov" and agg == "token-mean" and not use_tis:
                    print(f"clip_cov: {res[4]} candidate tokens exempted")
                w = tis if use_tis else np.ones_like(lp)
                loss, dagg = agg_loss(loss_mat * w, mask, forced or agg)
                policy.append(
                    dict(
                        loss_mode=mode,
                        loss_agg_mode=agg,
                        tis=use_tis,
                        pg_loss=float(loss),
                        grad_log_prob=t(dagg * w * dloss),
                        **{k: float(v) for k, v in metrics.items()},
                    )
                )
    loss_mat = rng.normal(0, 1, size=(n, r))
    loss_mat[mask == 0] = 1e30  # padding must never leak into the aggregate
    agg = [dict(loss_agg_mode=m, loss=float(agg_loss(loss_mat, mask, m)[0])) for m in AGG_MODES]
    vpreds = rng.normal(0, 1, size=(n, r))
    values = vpreds + rng.normal(0, 0.3, size=(n, r))
    returns = rng.normal(0, 1, size=(n, r))
    vl = []
    for m in AGG_MODES:
        loss, frac = value_loss(vpreds, returns, values, mask, 0.2, m)
        vl.append(dict(loss_agg_mode=m, vf_loss=float(loss), vf_clipfrac=float(frac)))
    write(
        "policy_loss.json",
        dict(
            inputs=dict(old_log_prob=t(old), log_prob=t(lp), advantages=t(adv), response_mask=t(mask),
                        rollout_log_prob=t(rollout)),
            config=cfg,
            policy=policy,
            agg=dict(loss_mat=t(np.where(mask == 0, 1e30, loss_mat)), cases=agg),
            # log_prob against rollout_log_prob over response_mask (row 6 empty).
            offpolicy={k: float(v) for k, v in offpolicy_metrics(lp, rollout, mask).items()},
            value=dict(vpreds=t(vpreds), values=t(values), returns=t(returns), cliprange_value=0.2, cases=vl),
        ),
    )


def make_kl(rng):
    n, r = 6, 5
    mask = lengths_to_mask([5, 3, 1, 4, 0, 5], r)
    old = -rng.uniform(0.1, 3.0, size=(n, r))
    ref = old + rng.normal(0, 0.5, size=(n, r))
    ref[0, 0] = old[0, 0] + 3.2  # low_var_kl clamps at 10
    ref[3, 1] = old[3, 1] - 2.5
    scores = np.zeros((n, r))
    for i in range(n):
        if mask[i].sum() > 0:
            scores[i, int(mask[i].sum()) - 1] = rng.choice([0.0, 1.0])
    beta = 0.05
    cases = []
    for kind in KL_TYPES:
        value, grad = kl_penalty(old, ref, kind)
        rewards, current_kl = apply_kl_penalty(scores, old, ref, mask, beta, kind)
        cases.append(dict(kl_type=kind, kl=t(value), grad=t(grad), token_level_rewards=t(rewards),
                          current_kl=float(current_kl)))
    write("kl.json", dict(token_level_scores=t(scores), old_log_prob=t(old), ref_log_prob=t(ref),
                          response_mask=t(mask), kl_coef=beta, cases=cases))


def main():
    rng = np.random.default_rng(20260129)
    make_advantages(rng)
    make_losses(rng)
    make_kl(rng)


if __name__ == "__main__":
    main()
