"""Routing tokens to experts: groups, capacities, dispatch and combine arrays, router losses.

Pure functions of router probabilities (no parameters), so each rule can be read and tested
alone. Routing happens per group of tokens: a group's experts each take at most `capacity`
tokens of that group. The two routers are Flaxformer's masked ones:

- tokens choose (`tokens_choose`): each token picks its top-k experts; the k-th choices of all
  tokens queue after every (k-1)-th choice, in token order or, batch-prioritised, by router
  confidence; a choice past its expert's capacity is dropped. Combine weights are the router
  probabilities of the chosen experts, not renormalised (T5X). Top-1 in token order is
  Switch / Hugging Face's router.
- experts choose (`experts_choose`): each expert takes its `capacity` most confident tokens; a
  token may be taken by several experts or by none.

A dropped token gets nothing back from the layer (its residual carries it on).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def num_groups(num_tokens: int, max_group_size: int, num_experts: int) -> int:
    """T5X's number of routing groups for the tokens of a batch.

    As T5X: the first count from max(num_tokens // max_group_size, num_experts) up that
    divides the tokens evenly and is a multiple of num_experts (what T5X's all-to-all needs).
    T5X multiplies num_experts by its mesh's expert replicas there, which makes the numbers
    depend on the device count; t5forge does not. Where no such count exists (fewer tokens
    than experts, as in one decoding step, where T5X refuses), the fewest groups of at most
    max_group_size tokens that divide the tokens evenly.
    """
    for count in range(max(num_tokens // max_group_size, num_experts), num_tokens + 1):
        if num_tokens % count == 0 and count % num_experts == 0:
            return count
    fewest = max(-(-num_tokens // max_group_size), 1)
    return next(n for n in range(fewest, num_tokens + 1) if num_tokens % n == 0)


def capacity_from_factor(
    tokens_per_group: int, num_experts: int, capacity_factor: float, min_capacity: int
) -> int:
    """T5X's expert capacity: max(round(factor * tokens_per_group / experts), min_capacity)."""
    return max(int(round(capacity_factor * tokens_per_group / num_experts)), min_capacity)


def _expert_choice_priority(expert_index, num_experts: int):
    """Each choice's place in its expert's queue, -1 where the expert is not chosen.

    expert_index [G, S, K] -> [G, S, E]: all first choices queue before all second ones, each
    in token order along S.
    """
    num_groups, tokens, k = expert_index.shape
    by_choice = jnp.swapaxes(expert_index, 1, 2).reshape(num_groups, k * tokens)
    mask = jax.nn.one_hot(by_choice, num_experts, dtype=jnp.int32)
    priority = jnp.cumsum(mask, axis=1) * mask - 1
    priority = priority.reshape(num_groups, k, tokens, num_experts)
    return jnp.max(priority, axis=1)


def tokens_choose(router_probs, num_selected: int, capacity: int, batch_prioritized: bool):
    """(dispatch bool[G, S, E, C], combine float32[G, S, E, C], top-k expert indices [G, S, K])
    for router_probs [G, S, E]."""
    num_experts = router_probs.shape[-1]
    gates, expert_index = jax.lax.top_k(router_probs, num_selected)
    if batch_prioritized:
        order = jnp.argsort(-gates[..., 0], axis=-1)
        sorted_index = jnp.take_along_axis(expert_index, order[..., None], axis=1)
        priority = _expert_choice_priority(sorted_index, num_experts)
        inverse = jnp.argsort(order, axis=-1)
        priority = jnp.take_along_axis(priority, inverse[..., None], axis=1)
    else:
        priority = _expert_choice_priority(expert_index, num_experts)
    # one_hot leaves -1 (not chosen) and >= capacity (overflow) all zeros: dropped.
    dispatch = jax.nn.one_hot(priority, capacity, dtype=jnp.bool_)
    combine = router_probs[..., None] * dispatch
    return dispatch, combine, expert_index


def experts_choose(router_probs, capacity: int):
    """(dispatch bool[G, S, E, C], combine float32[G, S, E, C]): each expert's `capacity`
    most probable tokens of the group (capacity at most S)."""
    tokens = router_probs.shape[1]
    gates, token_index = jax.lax.top_k(jnp.swapaxes(router_probs, 1, 2), min(capacity, tokens))
    dispatch = jax.nn.one_hot(token_index, tokens, dtype=jnp.bool_)  # [G, E, C, S]
    dispatch = jnp.moveaxis(dispatch, 3, 1)  # [G, S, E, C]
    combine = jnp.einsum("gec,gsec->gsec", gates, dispatch)
    return dispatch, combine


def router_z_loss(router_logits):
    """ST-MoE's router z-loss: the mean over tokens of logsumexp(logits)^2."""
    log_z = jax.nn.logsumexp(router_logits.astype(jnp.float32), axis=-1)
    return jnp.mean(jnp.square(log_z))


def load_balance_terms(router_probs, expert_index):
    """(fraction of each group's tokens choosing each expert, mean router probability per
    expert), both [G, E]: Switch's load-balancing loss is their product's mean times E^2."""
    num_experts = router_probs.shape[-1]
    chosen = jnp.max(jax.nn.one_hot(expert_index, num_experts, dtype=jnp.float32), axis=-2)
    return jnp.mean(chosen, axis=1), jnp.mean(router_probs, axis=1)


def load_balancing_loss(expert_fraction, router_prob_mean):
    """Switch Transformer's auxiliary loss from load_balance_terms' two [..., E] arrays."""
    num_experts = expert_fraction.shape[-1]
    return jnp.mean(expert_fraction * router_prob_mean) * num_experts**2
