"""The token-level policy loss of a batch of responses: log-probabilities under the sampling
distribution, micro-batches, and -w A log pi aggregated by token-mean or seqnorm.

Used by sera.trainers.sequence (RL and the supervised warm-up).
"""

from __future__ import annotations

import numpy as np
import torch

from sera.estimators import policy_loss


def token_logprobs(model, prompts, responses, temperature: float = 1.0, pad_token_id: int = 0,
                   dtype: str = "float32"):
    """Per-token log-probabilities of the responses under the sampling distribution
    softmax(logits / temperature), their mask, and the token entropies: (responses, tokens)
    tensors, the response of row i at positions len(prompt_i) - 1 onwards. dtype bfloat16 runs
    the model under autocast; the softmax is always float32."""
    device = next(model.parameters()).device
    rows = [p + r for p, r in zip(prompts, responses, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    mask = torch.zeros(len(rows), width - 1)
    for j, (prompt, row) in enumerate(zip(prompts, rows, strict=True)):
        ids[j, :len(row)] = torch.tensor(row)
        attention[j, :len(row)] = 1
        mask[j, len(prompt) - 1:len(row) - 1] = 1  # the positions that predict the response
    ids, attention, mask = ids.to(device), attention.to(device), mask.to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    chosen = log_probs.gather(2, ids[:, 1:, None])[..., 0]
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1)
    return chosen, mask, entropy


def micro_batches(lengths, sequences: int, tokens: int | None = None) -> list[slice]:
    """Consecutive slices of at most `sequences` items and, when given, at most `tokens` summed
    lengths (an item longer than that gets a slice of its own)."""
    parts, start, used = [], 0, 0
    for j, length in enumerate(lengths):
        full = j - start >= sequences or (tokens is not None and used + length > tokens)
        if j > start and full:
            parts.append(slice(start, j))
            start, used = j, 0
        used += length
    if start < len(lengths):
        parts.append(slice(start, len(lengths)))
    return parts


def sequence_loss(model, prompts, responses, advantages, weights, agg: str, max_len: int,
                  pad_token_id: int, micro_batch: int = 256, backward: bool = True,
                  temperature: float = 1.0, micro_batch_tokens: int | None = None,
                  dtype: str = "float32"):
    """-w A log pi over every response token, aggregated by `agg` over the whole batch and
    accumulated over micro-batches (backward=True calls backward on each). Returns the loss
    value and each response's mean token entropy."""
    total = (sum(len(r) for r in responses) if agg == "token-mean"
             else len(responses) * max_len)
    loss_value, entropies = 0.0, []
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses, strict=True)]
    for part in micro_batches(lengths, micro_batch, micro_batch_tokens):
        chosen, mask, entropy = token_logprobs(model, prompts[part], responses[part],
                                               temperature, pad_token_id, dtype)
        scale = torch.as_tensor(np.asarray(advantages)[part], dtype=torch.float32,
                                device=chosen.device)
        w = torch.as_tensor(np.asarray(weights)[part], dtype=torch.float32, device=chosen.device)
        loss = policy_loss(chosen, scale, mask, w, mode=agg, max_len=max_len, total=total)
        if backward:
            loss.backward()
        entropies.append(((entropy * mask).sum(1) / mask.sum(1).clamp(min=1)).cpu().numpy())
        loss_value += float(loss.detach())
    return loss_value, np.concatenate(entropies)
