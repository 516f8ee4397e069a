"""The mixture-of-experts MLP of --arch llama (docs/contracts.md §9 "Mixture of experts under
--arch llama", with §1's MoE variant for what it leaves to it), for llama_torch.py.

  router    logits = h Wg^T (no bias). softmax: s = softmax(logits) over E; sigmoid
            (DeepSeek-V3): s = sigmoid(logits).
  select    top-k of s (+ the --router-bias-update bias, for the choice only), ties to the
            lower expert index (a stable descending sort).
  gates     the chosen s; divided by their sum for sigmoid always and for softmax when
            k > 1; then times --routed-scale (both routers, §9a).
  capacity  --capacity-factor F > 0: ceil(N k F / E) (token, choice) pairs per expert and
            group, N = the group's tokens; pairs beyond it are dropped in token order (the
            token keeps its residual path and the other choices).
  output    sum over kept choices of gate * expert_e(h), each expert a SwiGLU of width
            --expert-ffn-dim; plus one shared SwiGLU of width S * Fe when --shared-experts S.
  aux       alpha E sum_e f_e P_e per group (one group = one microbatch of one worker), f_e
            the share of the group's pairs that chose e (before drops), P_e the mean over
            tokens of s_e (softmax) or of s_e / sum_j s_j (sigmoid).
  bias      after each step: bias_e += gamma * sign(mean load - load_e), load = the pairs
            that chose e during the step (before drops), in float32 as the engine keeps it.

Written for clarity, not speed: every expert runs on every token and a dense (N, E) weight
matrix, zero off the kept choices, combines them, so every expert gets a gradient (zero when
unused) and the drop order is a plain loop over tokens.
"""
import math

import torch
import torch.nn as nn


class SwiGLU(nn.Module):
    """down(silu(gate(h)) * up(h)), silu written out (the self-test checks it is F.silu)."""

    def __init__(self, C, F):
        super().__init__()
        self.gate_proj = nn.Linear(C, F, bias=False)
        self.up_proj = nn.Linear(C, F, bias=False)
        self.down_proj = nn.Linear(F, C, bias=False)

    def forward(self, x):
        g = self.gate_proj(x)
        return self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))


class MoE(nn.Module):
    def __init__(self, C, m):
        """m: experts, topk, capacity_factor, aux_loss_coef, expert_ffn_dim, shared_experts,
        router ("softmax" | "sigmoid"), routed_scale, router_bias_update."""
        super().__init__()
        if not 1 <= m.topk <= m.experts:
            raise ValueError(f"--topk {m.topk} must be in 1..--experts {m.experts}")
        self.E, self.k, self.cf, self.alpha = m.experts, m.topk, m.capacity_factor, m.aux_loss_coef
        self.router, self.scale, self.gamma = m.router, m.routed_scale, m.router_bias_update
        self.gate = nn.Linear(C, self.E, bias=False)
        if self.gamma > 0:
            self.gate.register_buffer("e_score_correction_bias", torch.zeros(self.E))
        self.experts = nn.ModuleList([SwiGLU(C, m.expert_ffn_dim) for _ in range(self.E)])
        if m.shared_experts > 0:
            self.shared_experts = SwiGLU(C, m.shared_experts * m.expert_ffn_dim)
        self.reset_stats()

    def reset_stats(self):
        self.selected = torch.zeros(self.E, dtype=torch.int64)  # pairs per expert, before drops
        self.load = torch.zeros(self.E, dtype=torch.int64)  # kept pairs per expert
        self.assignments, self.dropped, self.aux_values = 0, 0, []
        self.margin = math.inf  # smallest relative gap of the k-th and (k+1)-th selection score

    def select(self, scores):
        sel = scores.detach()
        if self.gamma > 0:
            sel = sel + self.gate.e_score_correction_bias
        order = torch.sort(sel, dim=1, descending=True, stable=True).indices
        if self.k < self.E and torch.is_grad_enabled():
            # Relative, as rounding errors of the scores are: for softmax this is about the
            # gap of the two logits, whatever the size of the probabilities.
            s = sel.gather(1, order)
            gap = (s[:, self.k - 1] - s[:, self.k]) / s[:, self.k - 1].abs().clamp(min=1e-30)
            self.margin = min(self.margin, gap.min().item())
        return order[:, :self.k]

    def capacity_mask(self, chosen):
        """(N, k) 1 for a kept pair, 0 for a dropped one (token-major order)."""
        N = chosen.shape[0]
        keep = torch.ones(N, self.k)
        if self.cf <= 0:
            return keep
        cap = math.ceil(N * self.k * self.cf / self.E)
        held = [0] * self.E
        for n, row in enumerate(chosen.tolist()):
            for j, e in enumerate(row):
                if held[e] >= cap:
                    keep[n, j] = 0
                else:
                    held[e] += 1
        return keep

    def aux_loss(self, scores, chosen):
        N = scores.shape[0]
        f = torch.bincount(chosen.reshape(-1), minlength=self.E).to(scores.dtype) / (N * self.k)
        P = scores if self.router == "softmax" else scores / scores.sum(dim=1, keepdim=True)
        return self.alpha * self.E * (f * P.mean(dim=0)).sum()

    def forward(self, h):
        """h (B, T, C), one group -> (y (B, T, C), aux loss (scalar))."""
        B, T, C = h.shape
        x = h.reshape(B * T, C)
        logits = self.gate(x)  # (N, E)
        scores = torch.softmax(logits, dim=1) if self.router == "softmax" else torch.sigmoid(logits)
        chosen = self.select(scores)  # (N, k)
        gates = scores.gather(1, chosen)
        if self.router == "sigmoid" or self.k > 1:
            gates = gates / gates.sum(dim=1, keepdim=True)
        gates = gates * self.scale
        keep = self.capacity_mask(chosen)
        weight = torch.zeros(B * T, self.E, dtype=gates.dtype).scatter(1, chosen, gates * keep)
        y = sum(weight[:, e:e + 1] * expert(x) for e, expert in enumerate(self.experts))
        if hasattr(self, "shared_experts"):
            y = y + self.shared_experts(x)
        aux = self.aux_loss(scores, chosen)
        if torch.is_grad_enabled():  # training forwards only, as the engine's step metrics
            self.record(chosen, keep, aux)
        return y.view(B, T, C), aux

    def record(self, chosen, keep, aux):
        self.selected += torch.bincount(chosen.reshape(-1), minlength=self.E)
        self.load += torch.bincount(chosen.reshape(-1), weights=keep.reshape(-1).double(),
                                    minlength=self.E).round().long()
        self.assignments += chosen.numel()
        self.dropped += int(chosen.numel() - keep.sum().item())
        self.aux_values.append(aux.item())

    @torch.no_grad()
    def update_bias(self):
        if self.gamma <= 0:
            return
        load = self.selected.double()
        err = load.mean() - load
        step = torch.sign(err).float() * torch.tensor(self.gamma, dtype=torch.float32)
        self.gate.e_score_correction_bias += step
