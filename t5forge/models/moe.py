"""The sparse MLP layer (mixture of experts) and the router losses it leaves behind.

`SparseMlp` stands where a layer's dense `mlp` would, under the same name, with Flaxformer's
parameter names: `mlp/router/router_weights/w/kernel` [emb, experts] and the experts' kernels
`mlp/expert/{wi, wi_0, wi_1, wo}/kernel` with a leading expert axis ([experts, emb, mlp] and
[experts, mlp, emb]; logical axis 'expert'). The tokens are split into routing groups (one
per sequence, Hugging Face's, or T5X's regrouping of the batch: T5Config.routing_groups), the
router (routing.py) fills each expert's `capacity` slots per group, the experts run on their
slots, and each token gets back its experts' outputs times their router probabilities. On an
expert mesh the slots travel to their experts' devices and back by all-to-all
(expert_dispatch.py).

Each sparse layer sows its router statistics into the 'intermediates' collection; the model
reads them with `router_losses` / `expert_metrics` when it trains (model.py).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import traverse_util

from t5forge.models import axes, expert_dispatch, routing
from t5forge.models.configs import SEQUENCE_GROUPS, TOKENS_CHOOSE, T5Config
from t5forge.models.layers import Dense, Dropout, activation_fn, constrain
from t5forge.models.products import einsum_product
from t5forge.models.quantized import Int8Kernel, int8_product

# Flaxformer's router initializer (routing.default_kernel_init).
ROUTER_INIT = nn.initializers.normal(stddev=2e-2)
# A kernel per expert: fan-in over each expert's own input axis.
EXPERT_INIT = nn.initializers.variance_scaling(
    1.0, "fan_in", "truncated_normal", in_axis=-2, out_axis=-1, batch_axis=(0,)
)
# The sown per-layer statistics (T5X's MOE_METRICS, and the load-balance terms that let Hugging
# Face's pooled auxiliary loss be formed across a stack's layers).
LOSS_STATS = ("router_z_loss", "auxiliary_loss", "expert_fraction", "router_prob_mean")
DIAGNOSTICS = ("fraction_tokens_left_behind", "expert_usage", "router_confidence")


class ExpertDense(nn.Module):
    """x [experts, n, in] @ kernel [experts, in, out], one kernel per expert."""

    features: int
    axes: tuple[str, str]
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        kernel = self.param(
            "kernel",
            nn.with_logical_partitioning(EXPERT_INIT, (axes.EXPERT, *self.axes)),
            (x.shape[0], x.shape[-1], self.features),
            jnp.float32,
        )
        dtype = jnp.dtype(self.dtype)
        if isinstance(kernel, Int8Kernel):  # weights_dtype='int8': each expert's own product
            return jax.vmap(lambda rows, own: int8_product(rows, own, dtype))(x, kernel)
        # As products.dense_product: a kernel stored narrower (weights_dtype) multiplies in its
        # own dtype, the result in `dtype`.
        compute = kernel.dtype if jnp.finfo(kernel.dtype).bits < jnp.finfo(dtype).bits else dtype
        return einsum_product("eni,eio->eno", x.astype(compute), kernel.astype(compute), dtype)


class ExpertMlp(nn.Module):
    """Every expert's MLP (T5's gated or plain form) over its slots [experts, n, emb]."""

    emb_dim: int
    mlp_dim: int
    activations: tuple[str, ...]
    dropout_rate: float = 0.0
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, deterministic=True):
        gated = len(self.activations) > 1
        hidden = None
        for i, name in enumerate(self.activations):
            dense = ExpertDense(
                self.mlp_dim, (axes.EMBED, axes.MLP), self.dtype, name=f"wi_{i}" if gated else "wi"
            )
            h = activation_fn(name)(dense(x))
            hidden = h if hidden is None else hidden * h
        hidden = constrain(hidden, axes.EXPERT, axes.EXPERT_REPLICAS, axes.MLP)
        # One mask per expert shared by its slots, as Flaxformer's vmapped MlpBlock.
        hidden = Dropout(self.dropout_rate, broadcast_dims=(-2,))(
            hidden, deterministic=deterministic
        )
        return ExpertDense(self.emb_dim, (axes.MLP, axes.EMBED), self.dtype, name="wo")(hidden)


class RouterWeights(nn.Module):
    """Router logits [..., experts] in float32 (Flaxformer's RouterWeights, its kernel `w`)."""

    num_experts: int

    @nn.compact
    def __call__(self, x):
        dense = Dense(
            self.num_experts, (axes.EMBED, axes.UNMODELED), jnp.float32, ROUTER_INIT, name="w"
        )
        return dense(x.astype(jnp.float32))


class Router(nn.Module):
    """Holds `router_weights`, under Flaxformer's module names."""

    num_experts: int

    @nn.compact
    def __call__(self, x):
        return RouterWeights(self.num_experts, name="router_weights")(x)


def routing_plan(config: T5Config, batch: int, length: int, deterministic: bool):
    """(groups, tokens per group, expert capacity) for a [batch, length] input."""
    if config.routing_groups == SEQUENCE_GROUPS:
        return batch, length, config.expert_capacity
    tokens = batch * length
    groups = routing.num_groups(tokens, config.expert_group_size, config.num_experts)
    factor = config.eval_capacity_factor if deterministic else config.train_capacity_factor
    capacity = routing.capacity_from_factor(
        tokens // groups, config.num_experts, factor, config.min_expert_capacity
    )
    return groups, tokens // groups, capacity


class SparseMlp(nn.Module):
    """A mixture of `num_experts` MLPs behind a router, for one stack's sparse layers."""

    config: T5Config
    router: str = TOKENS_CHOOSE
    batch_prioritized: bool = False

    @nn.compact
    def __call__(self, x, deterministic=True):
        cfg = self.config
        batch, length, width = x.shape
        num_experts = cfg.num_experts
        groups, group_size, capacity = routing_plan(cfg, batch, length, deterministic)
        tokens = constrain(
            x.reshape(groups, group_size, width), axes.BATCH, axes.LENGTH, axes.EMBED
        )
        router_inputs = tokens.astype(jnp.float32)
        if not deterministic and cfg.router_jitter_noise > 0:
            noise = cfg.router_jitter_noise
            router_inputs = router_inputs * jax.random.uniform(
                self.make_rng("dropout"), router_inputs.shape, jnp.float32, 1 - noise, 1 + noise
            )
        logits = Router(num_experts, name="router")(router_inputs)
        probs = jax.nn.softmax(logits, axis=-1)
        if self.router == TOKENS_CHOOSE:
            dispatch, combine, chosen = expert_dispatch.route_locally(
                functools.partial(
                    routing.tokens_choose,
                    num_selected=cfg.num_selected_experts,
                    capacity=capacity,
                    batch_prioritized=self.batch_prioritized,
                ),
                probs,
            )
            fraction, prob_mean = routing.load_balance_terms(probs, chosen)
            self.sow("intermediates", "expert_fraction", fraction)
            self.sow("intermediates", "router_prob_mean", prob_mean)
            auxiliary = routing.load_balancing_loss(fraction, prob_mean)
        else:
            dispatch, combine = expert_dispatch.route_locally(
                functools.partial(routing.experts_choose, capacity=capacity), probs
            )
            auxiliary = jnp.float32(0.0)
        dtype = x.dtype
        slots = einsum_product("gsd,gsec->gecd", tokens, dispatch.astype(dtype), dtype)
        slots = constrain(
            expert_dispatch.to_experts(slots),
            axes.EXPERT,
            axes.EXPERT_REPLICAS,
            axes.LENGTH,
            axes.EMBED,
        )
        slots_shape = slots.shape
        experts = ExpertMlp(
            cfg.emb_dim,
            cfg.expert_mlp_dim or cfg.mlp_dim,
            cfg.mlp_activations,
            cfg.dropout_rate if cfg.expert_dropout_rate is None else cfg.expert_dropout_rate,
            dtype,
            name="expert",
        )
        outputs = experts(slots.reshape(num_experts, -1, width), deterministic)
        outputs = constrain(
            outputs.reshape(slots_shape), axes.EXPERT, axes.EXPERT_REPLICAS, axes.LENGTH, axes.EMBED
        )
        returned = expert_dispatch.from_experts(outputs)
        y = einsum_product("gecd,gsec->gsd", returned, combine.astype(dtype), dtype)
        self._sow_diagnostics(logits, auxiliary, dispatch, combine, capacity)
        return constrain(y.reshape(batch, length, width), axes.BATCH, axes.LENGTH, axes.EMBED)

    def _sow_diagnostics(self, logits, auxiliary, dispatch, combine, capacity):
        """T5X's per-layer router losses and routing diagnostics."""
        groups, tokens = dispatch.shape[:2]
        routed = jnp.sum(dispatch, dtype=jnp.float32)
        somewhere = jnp.sum(jnp.max(dispatch, axis=(-1, -2)), dtype=jnp.float32)
        if self.router == TOKENS_CHOOSE:
            usage = routed / (self.config.num_experts * capacity * groups)
        else:
            usage = jnp.float32(1.0)  # experts always fill their slots
        values = {
            "router_z_loss": routing.router_z_loss(logits),
            "auxiliary_loss": auxiliary,
            # counted, then divided: 1 - a / b may come out a hair below 0 under jit
            "fraction_tokens_left_behind": (groups * tokens - somewhere) / (groups * tokens),
            "expert_usage": usage,
            "router_confidence": jnp.sum(combine) / jnp.maximum(routed, 1.0),
        }
        for name, value in values.items():
            self.sow("intermediates", name, jnp.asarray(value, jnp.float32))


def _sown(intermediates, name: str, ndim: int = 0) -> dict[str, list]:
    """{stack: [each sparse layer's `name` value]} from a network's 'intermediates'; a value
    has `ndim` axes, one more (the layers') when its stack is scanned."""
    found: dict[str, list] = {}
    for path, values in traverse_util.flatten_dict(intermediates).items():
        if path[-1] == name:
            for value in values:
                layers = list(value) if value.ndim > ndim else [value]
                found.setdefault(path[0], []).extend(layers)
    return found


def router_losses(intermediates, config: T5Config) -> dict:
    """The unweighted router losses of one forward pass, {'router_z_loss', 'auxiliary_loss'}
    and, per stack, '<stack>/router_z_loss' and '<stack>/auxiliary_loss'.

    'batch' groups (T5X): the losses are the means over every sparse layer of the layer's own
    loss. 'sequence' groups (Hugging Face): per stack, the z-loss is the mean over its layers
    and the auxiliary loss is formed from the load-balance terms pooled over its layers (HF
    concatenates the layers' router logits), and the totals are the stacks' sums.
    """
    z_by_stack = _sown(intermediates, "router_z_loss")
    aux_by_stack = _sown(intermediates, "auxiliary_loss")
    losses = {}
    for stack, values in z_by_stack.items():
        losses[f"{stack}/router_z_loss"] = jnp.mean(jnp.stack(values))
        losses[f"{stack}/auxiliary_loss"] = jnp.mean(jnp.stack(aux_by_stack[stack]))
    if config.routing_groups == SEQUENCE_GROUPS:
        fractions = _sown(intermediates, "expert_fraction", 2)
        prob_means = _sown(intermediates, "router_prob_mean", 2)
        for stack, values in fractions.items():
            losses[f"{stack}/auxiliary_loss"] = routing.load_balancing_loss(
                jnp.mean(jnp.stack(values), axis=0), jnp.mean(jnp.stack(prob_means[stack]), axis=0)
            )
        stacks = sorted(z_by_stack)
        losses["router_z_loss"] = sum(losses[f"{s}/router_z_loss"] for s in stacks)
        losses["auxiliary_loss"] = sum(losses[f"{s}/auxiliary_loss"] for s in stacks)
        return losses
    every_z = [v for values in z_by_stack.values() for v in values]
    every_aux = [v for values in aux_by_stack.values() for v in values]
    losses["router_z_loss"] = jnp.mean(jnp.stack(every_z))
    losses["auxiliary_loss"] = jnp.mean(jnp.stack(every_aux))
    return losses


def expert_metrics(intermediates, config: T5Config) -> tuple:
    """(weighted router loss to add to the training loss, T5X's 'experts/...' metrics)."""
    losses = router_losses(intermediates, config)
    auxiliary = config.aux_loss_factor * losses["auxiliary_loss"]
    z_loss = config.router_z_loss_factor * losses["router_z_loss"]
    metrics = {"experts/auxiliary_loss": auxiliary, "experts/router_z_loss": z_loss}
    for name in DIAGNOSTICS:
        values = [v for layer in _sown(intermediates, name).values() for v in layer]
        metrics[f"experts/{name}"] = jnp.mean(jnp.stack(values))
    return auxiliary + z_loss, metrics
