"""The prior of the checkpointing advisor's model, from a training job's shape alone: bytes per
device of the weights, gradients, optimizer state and head, and per layer of the activations a
layer keeps with and without checkpointing (see the package's docstring and docs/advisor.md)."""

from __future__ import annotations

from dataclasses import dataclass

GIB = float(2**30)
ATTENTION_KINDS = ("eager", "flash", "sdpa")
_ACT_BYTES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp32": 4, "float32": 4}


@dataclass(frozen=True)
class ModelShape:
    """What the prior needs to know about a training job; one device's view of it."""

    n_layers: int
    hidden: int
    n_heads: int
    seq_len: int
    micro_batch: int
    vocab_size: int
    ffn_hidden: int | None = None  # None: 4 * hidden
    gated_mlp: bool = False  # SwiGLU-style: three FFN matrices, four FFN-wide activations
    n_kv_heads: int | None = None  # None: n_heads
    tie_embeddings: bool = False
    precision: str = "bf16"  # activation dtype: bf16 | fp16 | fp32
    weights_fp32: bool = False  # autocast keeps fp32 weights and gradients (torch-llm does)
    attention: str = "eager"  # eager stores the score matrix; flash and sdpa do not
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    zero_stage: int = 0

    def problems(self) -> list[str]:
        out = []
        for name in ("n_layers", "hidden", "n_heads", "seq_len", "micro_batch", "vocab_size"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("tensor_parallel", "pipeline_parallel", "data_parallel"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.precision.lower() not in _ACT_BYTES:
            out.append(f"unknown precision {self.precision!r} (bf16, fp16, fp32)")
        if self.attention not in ATTENTION_KINDS:
            out.append(f"unknown attention kind {self.attention!r} ({', '.join(ATTENTION_KINDS)})")
        if not 0 <= self.zero_stage <= 3:
            out.append(f"zero_stage must be 0..3, got {self.zero_stage}")
        return out

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def act_bytes(self) -> int:
        return _ACT_BYTES.get(self.precision.lower(), 2)

    @property
    def layer_params(self) -> int:
        h, kv = self.hidden, self.kv_heads * (self.hidden // self.n_heads)
        attn = 2 * h * h + 2 * h * kv
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn
        return attn + mlp + 2 * h  # two norms

    @property
    def n_params(self) -> int:
        embed = self.vocab_size * self.hidden
        return self.n_layers * self.layer_params + embed * (1 if self.tie_embeddings else 2) + self.hidden


def full_layers(k: int, n_layers: int) -> int:
    """Layers whose full activations are held at the peak: the L - k not checkpointed, but never
    fewer than one, because during backward the checkpointed layer being recomputed holds its full
    activations again. So checkpointing the last layer saves (almost) nothing: k = L - 1 and k = L
    peak alike, as measured (docs/advisor.md)."""
    return max(n_layers - k, 1)


@dataclass(frozen=True)
class MemoryPrior:
    """The analytical estimate, in GiB per device; ``peak(k) = fixed + A*max(L-k, 1) + C*k``."""

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    head_gib: float  # logits, their fp32 copy for the loss and its gradient; embedding output
    baseline_gib: float  # what the process holds before the model (runtime, allocator)
    baseline_sd_gib: float
    layer_activation_gib: float  # A: one layer that keeps its activations
    layer_checkpointed_gib: float  # C: one checkpointed layer (its input)
    n_layers: int
    recompute_fraction: float  # one layer's forward FLOPs over the whole step's (forward + backward)

    @property
    def static_gib(self) -> float:
        return self.weights_gib + self.gradients_gib + self.optimizer_gib

    @property
    def fixed_gib(self) -> float:
        return self.baseline_gib + self.static_gib + self.head_gib

    def peak_gib(self, k: int) -> float:
        full = full_layers(k, self.n_layers)
        return self.fixed_gib + self.layer_activation_gib * full + self.layer_checkpointed_gib * k


def layer_activation_bytes(shape: ModelShape) -> float:
    """Bytes one non-checkpointed layer stores for backward, per device.

    Korthikanti et al. (2022), Table 2: ``s*b*h*(34 + 5*a*s/h)`` in 16-bit. Of the 34: 11 attention
    (QKV input 2, Q and K 4, V 2, output-projection input 2, dropout mask 1), 4 for two layer norms,
    19 for the MLP (input 2, two 4h-wide tensors 16, dropout mask 1). Generalised here: the 16 scales
    with ffn/4h and doubles for a gated MLP (gate, up, activation, product); K and V shrink with
    grouped-query attention; everything scales with the activation dtype; the score term (softmax
    output, its dropout mask and output) is dropped for flash/SDPA attention; all of it is divided by
    tensor parallel (sequence parallelism assumed, as Megatron's estimate does).
    """
    s, b, h, a = shape.seq_len, shape.micro_batch, shape.hidden, shape.n_heads
    kv_frac = shape.kv_heads / shape.n_heads
    attention = 11.0 - 4.0 * (1.0 - kv_frac)
    mlp = 3.0 + 16.0 * (shape.ffn / (4.0 * h)) * (2.0 if shape.gated_mlp else 1.0)
    per_sbh = attention + 4.0 + mlp
    if shape.attention == "eager":
        per_sbh += 5.0 * a * s / h
    scale = shape.act_bytes / 2.0
    return s * b * h * per_sbh * scale / shape.tensor_parallel


def checkpointed_layer_bytes(shape: ModelShape) -> float:
    """A checkpointed layer keeps only its input: ``2*s*b*h`` bytes in 16-bit, divided by tensor parallel."""
    return shape.seq_len * shape.micro_batch * shape.hidden * shape.act_bytes / shape.tensor_parallel


def memory_prior(
    shape: ModelShape, *, baseline_gib: float = 0.0, baseline_sd_gib: float = 0.5
) -> MemoryPrior:
    """The analytical estimate for ``shape`` (see :func:`layer_activation_bytes` for the activations).

    Static state per parameter: mixed precision keeps 16-bit weights and gradients plus fp32 master
    weights, momentum and variance (2 + 2 + 12 bytes, the ZeRO paper's K = 12); fp32 training or
    autocast over fp32 weights keeps 4 + 4 + 8. ZeRO stage >= 1 shards the optimizer state over the
    data-parallel degree, >= 2 the gradients, 3 the weights. Tensor and pipeline parallel split the
    parameters; a pipeline's first stage holds ``pp`` micro-batches of ``L/pp`` layers in flight
    (1F1B), so its activations are those of L layers.
    """
    if shape.weights_fp32 or shape.act_bytes == 4:
        w_b, g_b, o_b = 4.0, 4.0, 8.0
    else:
        w_b, g_b, o_b = 2.0, 2.0, 12.0
    dp = max(1, shape.data_parallel)
    params = shape.n_params / (shape.tensor_parallel * shape.pipeline_parallel)
    weights = params * w_b / (dp if shape.zero_stage >= 3 else 1)
    grads = params * g_b / (dp if shape.zero_stage >= 2 else 1)
    optim = params * o_b / (dp if shape.zero_stage >= 1 else 1)
    s, b = shape.seq_len, shape.micro_batch
    # Logits in the activation dtype, their fp32 copy for the loss, and the gradient of that copy.
    head = s * b * shape.vocab_size * (shape.act_bytes + 4 + 4) / shape.tensor_parallel
    head += 2 * s * b * shape.hidden * shape.act_bytes / shape.tensor_parallel  # embedding out, final norm
    flops_layer = 2.0 * shape.layer_params + 4.0 * s * shape.hidden  # forward, per token
    flops_head = 2.0 * shape.vocab_size * shape.hidden
    recompute = flops_layer / (3.0 * (shape.n_layers * flops_layer + flops_head))
    return MemoryPrior(
        weights_gib=weights / GIB,
        gradients_gib=grads / GIB,
        optimizer_gib=optim / GIB,
        head_gib=head / GIB,
        baseline_gib=baseline_gib,
        baseline_sd_gib=baseline_sd_gib,
        layer_activation_gib=layer_activation_bytes(shape) / GIB,
        layer_checkpointed_gib=checkpointed_layer_bytes(shape) / GIB,
        n_layers=shape.n_layers,
        recompute_fraction=recompute,
    )


def similar_shapes(a: ModelShape, b: ModelShape, *, max_ratio: float = 4.0) -> bool:
    """Whether runs of ``b`` may inform the per-layer coefficients of ``a``: the same kind of block
    (precision, weight dtype, attention kind, gated MLP) and per-layer activations within a factor."""
    if (a.precision.lower(), a.weights_fp32, a.attention, a.gated_mlp) != (
        b.precision.lower(),
        b.weights_fp32,
        b.attention,
        b.gated_mlp,
    ):
        return False
    ratio = layer_activation_bytes(a) / layer_activation_bytes(b)
    return 1.0 / max_ratio <= ratio <= max_ratio
