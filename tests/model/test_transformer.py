"""model/transformer.py: properties of the full model (causality, padding, cache == no cache, dtypes)."""

import functools
import inspect

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.ids import NEG_INF
from t2t_jax.kernels import choice
from t2t_jax.model import attention as attention_lib
from t2t_jax.model import layers
from t2t_jax.model import transformer

from attention_reference import numpy_attention   # tests/attention_reference.py

# Tiny, with d_k != d_v so that a swapped projection cannot go unnoticed.
CFG = configs.get_config("demo", vocab_size=23, num_layers=2, d_model=16, d_ff=32, num_heads=2,
                         d_k=8, d_v=6, max_len=16, dropout_rate=0.1, attention_dropout_rate=0.1)
# Every optional path at once: restricted attention, learned positions, unshared embeddings.
# One layer keeps its compile time down.
CFG_VARIANT = CFG.replace(attention_window=1, positional_encoding="learned",
                          embeddings="separate", num_layers=1)
# A published model's options (Marian's, OPUS-MT's): none of them the paper's.
CFG_MARIAN = CFG.replace(activation="swish", attention_bias=True, output_bias=True,
                         position_layout="halves", layer_norm_epsilon=1e-5, num_layers=1)
# Separate vocabularies (a target side of 29 ids, its embedding the output layer) and a
# decoder shallower than the encoder.
CFG_OWN_TARGET = CFG_MARIAN.replace(embeddings="tied_output", target_vocab_size=29,
                                    num_layers=2, decoder_layers=1)


def _batch(rng, batch, length, lengths, vocab=23):
  ids = rng.integers(3, vocab, (batch, length))
  for b, n in enumerate(lengths):
    ids[b, n:] = 0
  return jnp.asarray(ids, jnp.int32)


RNG = np.random.default_rng(0)
INPUTS = _batch(RNG, 3, 7, [7, 4, 6])
TARGETS = _batch(RNG, 3, 6, [6, 6, 3])


@functools.lru_cache(maxsize=None)
def _params(cfg):
  params = transformer.init_params(cfg.model, jax.random.key(0))
  if cfg.attention_bias or cfg.output_bias:   # biases start at 0: move them off it
    rng = np.random.default_rng(5)
    params = flax.traverse_util.unflatten_dict({
        path: x + jnp.asarray(rng.normal(size=x.shape), x.dtype) if "bias" in path[-1] else x
        for path, x in flax.traverse_util.flatten_dict(params).items()})
  return params


@functools.lru_cache(maxsize=None)
def _forward_with_weights(cfg):
  """jit(apply) returning (logits, intermediates); one compile per config serves every test."""
  def fwd(params, inputs, targets):
    return transformer.Transformer(cfg.model).apply(
        {"params": params}, inputs, targets, mutable=["intermediates"])
  return jax.jit(fwd)


def _forward(cfg):
  return lambda *args: _forward_with_weights(cfg)(*args)[0]


def _cached_logits(cfg, params, inputs, targets):
  """decode_step over every position (traced), feeding the shifted targets: [batch, length, vocab]."""
  # Two spare cache slots: unwritten (zero) keys must stay masked.
  cache = transformer.init_cache(cfg.model, params, inputs, targets.shape[1] + 2)
  def body(cache, xs):
    token, position = xs
    logits, cache = transformer.decode_step(cfg.model, params, cache, token, position)
    return cache, logits
  decoder_inputs = transformer.shift_right(targets).T                  # [length, batch]
  _, logits = jax.lax.scan(body, cache, (decoder_inputs, jnp.arange(targets.shape[1])))
  return jnp.swapaxes(logits, 0, 1)


def test_forward_shapes_dtypes_and_plain_float32_params():
  params = _params(CFG)
  assert type(params) is dict
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
  # One matrix for source, target and pre-softmax when shared; three otherwise.
  assert "embedding" in params and "source_embedding" not in params
  assert {"source_embedding", "target_embedding", "output_embedding"} <= set(_params(CFG_VARIANT))
  emb = np.asarray(params["embedding"]["embedding"])
  assert emb.shape == (23, 16)
  assert 0.7 < emb.std() * np.sqrt(16) < 1.3      # std d_model^-0.5 (docs/model.md)
  # Glorot on the flattened [d_model, heads*d_k] matrix, not on the 3-D kernel's own axes.
  query = np.asarray(params["encoder"]["layers_0"]["self_attention"]["query"]["kernel"])
  assert query.shape == (16, 2, 8)
  assert 0.8 < query.std() / np.sqrt(2 / (16 + 16)) < 1.2
  logits = _forward(CFG)(params, INPUTS, TARGETS)
  assert logits.shape == (3, 6, 23) and logits.dtype == jnp.float32
  assert np.all(np.isfinite(logits))


@pytest.mark.parametrize("cfg", [CFG, CFG_VARIANT], ids=["base", "window_learned_unshared"])
def test_changing_target_j_changes_no_logit_at_or_before_j(cfg):
  params, fwd = _params(cfg), _forward(cfg)
  base = np.asarray(fwd(params, INPUTS, TARGETS))
  for j in range(TARGETS.shape[1]):
    changed = TARGETS.at[0, j].set(TARGETS[0, j] % 20 + 3)
    logits = np.asarray(fwd(params, INPUTS, changed))
    np.testing.assert_allclose(logits[0, :j + 1], base[0, :j + 1], atol=1e-5)
    np.testing.assert_allclose(logits[1:], base[1:], atol=1e-5)
    if j + 1 < TARGETS.shape[1]:               # the test can see a change where one is due
      assert np.abs(logits[0, j + 1] - base[0, j + 1]).max() > 1e-4


def test_extra_padding_changes_no_logit():
  params, fwd = _params(CFG), _forward(CFG)
  base = np.asarray(fwd(params, INPUTS, TARGETS))
  longer = np.asarray(fwd(params, jnp.pad(INPUTS, ((0, 0), (0, 3))), jnp.pad(TARGETS, ((0, 0), (0, 2)))))
  real = np.asarray(TARGETS != 0)   # padded positions' logits are never used
  np.testing.assert_allclose(longer[:, :TARGETS.shape[1]][real], base[real], atol=1e-5)
  # Changing source padding into a real token does change the output (the test can fail).
  assert np.abs(np.asarray(fwd(params, INPUTS.at[1, 5].set(7), TARGETS)) - base)[1].max() > 1e-4


def test_fully_padded_rows_give_finite_logits():
  inputs = INPUTS.at[2].set(0)
  targets = TARGETS.at[2].set(0)
  logits = np.asarray(_forward(CFG)(_params(CFG), inputs, targets))
  assert np.all(np.isfinite(logits))


@pytest.mark.parametrize("cfg", [CFG, CFG_VARIANT, CFG_MARIAN, CFG_OWN_TARGET],
                         ids=["base", "window_learned_unshared", "marian", "own_target"])
def test_cached_decoding_reproduces_full_forward(cfg):
  params = _params(cfg)
  full = np.asarray(_forward(cfg)(params, INPUTS, TARGETS))
  real = np.asarray(TARGETS != 0)
  cached = np.asarray(jax.jit(functools.partial(_cached_logits, cfg))(params, INPUTS, TARGETS))
  np.testing.assert_allclose(cached[real], full[real], atol=1e-5, rtol=1e-5)


def test_cache_leaves_have_leading_batch_and_decode_step_keeps_the_structure():
  # Shapes only (beam search tiles/gathers every leaf along axis 0); the values
  # are checked by test_cached_decoding_reproduces_full_forward.
  params = _params(CFG)
  cache = jax.eval_shape(lambda p, i: transformer.init_cache(CFG.model, p, i, 5), params, INPUTS)
  for leaf in jax.tree.leaves(cache):
    assert leaf.shape[0] == INPUTS.shape[0]
  logits, new_cache = jax.eval_shape(
      functools.partial(transformer.decode_step, CFG.model), params, cache,
      jnp.zeros((3,), jnp.int32), 0)
  assert logits.shape == (3, 23) and logits.dtype == jnp.float32
  features, _ = jax.eval_shape(functools.partial(transformer.decode_features, CFG.model),
                               params, cache, jnp.zeros((3,), jnp.int32), 0)
  assert features.shape == (3, 16) and features.dtype == jnp.float32
  assert jax.tree.structure(new_cache) == jax.tree.structure(cache)
  assert all(jax.tree.leaves(jax.tree.map(lambda a, b: a.shape == b.shape, new_cache, cache)))


def _weights(state, stack, layer, name):
  (w,) = state["intermediates"][stack][f"layers_{layer}"][name]["attention_weights"]
  return np.asarray(w)


def _attention_inputs(cfg, params):
  """One forward pass: ({"intermediates": the sown probabilities}, {an attention's path:
  (inputs_q, inputs_kv)}), the inputs each `MultiHeadAttention` was called with."""
  call = inspect.signature(attention_lib.MultiHeadAttention.__call__)

  def forward(params):
    seen = {}
    def record(next_fun, args, kwargs, context):
      if (isinstance(context.module, attention_lib.MultiHeadAttention)
          and context.method_name == "__call__"):
        given = call.bind(context.module, *args, **kwargs).arguments
        kv = given.get("inputs_kv")
        seen["/".join(context.module.path)] = (given["inputs_q"],
                                               given["inputs_q"] if kv is None else kv)
      return next_fun(*args, **kwargs)
    with nn.intercept_methods(record):
      _, state = transformer.Transformer(cfg.model).apply(
          {"params": params}, INPUTS, TARGETS, mutable=["intermediates"])
    return state, seen
  return jax.jit(forward)(params)


def test_sown_attention_weights_are_each_layers_masked_softmax_of_its_inputs():
  # Each attention's sown weights, at their documented path, are softmax(Q K^T / sqrt(d_k) +
  # mask) recomputed in NumPy from that layer's parameters and the inputs it was called with,
  # the mask from the token ids: real queries and keys, and in the decoder's self-attention
  # keys at or before the query.
  params = jax.tree.map(np.asarray, _params(CFG))
  state, seen = _attention_inputs(CFG, params)
  src, tgt = np.asarray(INPUTS) != 0, np.asarray(TARGETS) != 0
  causal = np.tril(np.ones((tgt.shape[1],) * 2, bool))
  kinds = {("encoder", "self_attention"): (src, src, True),
           ("decoder", "self_attention"): (tgt, tgt, causal),
           ("decoder", "cross_attention"): (tgt, src, True)}
  for layer in range(CFG.num_layers):
    for (stack, name), (real_q, real_kv, allowed) in kinds.items():
      where = f"{stack}/layers_{layer}/{name}"
      w = _weights(state, stack, layer, name)
      assert w.shape == (3, 2, real_q.shape[1], real_kv.shape[1]), where
      p = params[stack][f"layers_{layer}"][name]
      inputs_q, inputs_kv = (np.asarray(x, np.float64) for x in seen[where])
      project = lambda x, kernel: np.einsum("bld,dhk->blhk", x, kernel)
      mask = real_q[:, None, :, None] & real_kv[:, None, None, :] & allowed
      _, want = numpy_attention(project(inputs_q, p["query"]["kernel"]),
                                project(inputs_kv, p["key"]["kernel"]),
                                project(inputs_kv, p["value"]["kernel"]),
                                np.where(mask, 0.0, NEG_INF))
      # Real queries: the reference. A query on padding has nothing to attend to: uniform.
      rows = np.broadcast_to(real_q[:, None, :], w.shape[:3])
      np.testing.assert_allclose(w[rows], want[rows], atol=1e-6, err_msg=where)
      np.testing.assert_allclose(w[~rows], 1.0 / w.shape[-1], atol=1e-6, err_msg=where)
    # Row 1 has 4 real source tokens: its real queries put no weight on padding.
    enc = _weights(state, "encoder", layer, "self_attention")
    dec = _weights(state, "decoder", layer, "self_attention")
    cross = _weights(state, "decoder", layer, "cross_attention")
    assert np.all(enc[1, :, :4, 4:] == 0) and np.all(cross[1, :, :, 4:] == 0)
    assert np.all(np.triu(dec[0], k=1) == 0)


def test_restricted_attention_puts_zero_weight_beyond_the_window():
  _, state = _forward_with_weights(CFG_VARIANT)(_params(CFG_VARIANT), INPUTS, TARGETS)
  r = CFG_VARIANT.attention_window
  i, j = np.indices((7, 7))
  enc = _weights(state, "encoder", 0, "self_attention")[0]              # row 0: no padding
  assert np.all(enc[:, np.abs(i - j) > r] == 0)
  assert np.all(enc[:, np.abs(i - j) <= r] > 0)
  i, j = np.indices((6, 6))
  dec = _weights(state, "decoder", 0, "self_attention")[0]
  allowed = (j <= i) & (i - j <= r)
  assert np.all(dec[:, ~allowed] == 0) and np.all(dec[:, allowed] > 0)


def test_jit_and_no_jit_agree():
  params = _params(CFG_VARIANT)   # one layer: op-by-op dispatch is slow
  eager = transformer.Transformer(CFG_VARIANT.model).apply({"params": params}, INPUTS[:1],
                                                           TARGETS[:1])
  jitted = _forward(CFG_VARIANT)(params, INPUTS, TARGETS)[:1]
  np.testing.assert_allclose(eager, jitted, atol=1e-5)


def test_bfloat16_compute_stays_close_to_float32_with_float32_params():
  cfg16 = CFG.replace(dtype="bfloat16")
  params = _params(CFG)
  shapes = jax.eval_shape(functools.partial(transformer.init_params, cfg16.model),
                          jax.random.key(0))
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(shapes))
  f32 = np.asarray(_forward(CFG)(params, INPUTS, TARGETS))
  both = jax.jit(lambda p, i, t: (transformer.Transformer(cfg16.model).apply({"params": p}, i, t),
                                  _cached_logits(cfg16, p, i, t)))     # one compile
  b16, cached = both(params, INPUTS, TARGETS)
  assert b16.dtype == cached.dtype == jnp.float32
  assert np.abs(np.asarray(b16) - f32).max() < 0.05 * np.abs(f32).max()
  cached = np.asarray(cached)
  real = np.asarray(TARGETS != 0)
  assert np.abs(cached[real] - f32[real]).max() < 0.05 * np.abs(f32).max()


def test_train_mode_applies_dropout_from_the_given_key():
  params = _params(CFG)
  train = jax.jit(lambda key: transformer.Transformer(CFG.model).apply(
      {"params": params}, INPUTS, TARGETS, train=True, rngs={"dropout": key}))
  key = jax.random.key  # the hash masks draw only two seeds from it (kernels/dropout.py)
  a, b, a2 = train(key(1)), train(key(2)), train(key(1))
  np.testing.assert_array_equal(a, a2)
  assert np.abs(np.asarray(a) - np.asarray(b)).max() > 1e-3
  assert np.all(np.isfinite(a))


@pytest.mark.parametrize("mode", configs.EMBEDDINGS)
def test_each_embedding_mode_reads_its_matrices_in_its_roles(mode):
  cfg = CFG.replace(embeddings=mode, num_layers=1, decoder_layers=2, target_vocab_size=(
      29 if mode in configs.OWN_TARGET_VOCABULARY else None))
  params = transformer.init_params(cfg.model, jax.random.key(0))
  names = transformer.EMBEDDING_PARAMS[mode]
  assert set(params) - {"encoder", "decoder"} == set(names.values())
  assert sorted(params["encoder"]) == ["layers_0"] and sorted(params["decoder"]) == [
      "layers_0", "layers_1"]
  read = transformer.Transformer(cfg.model).apply(
      {"params": params}, method=lambda m: [m._embedding(role).embedding  # pylint: disable=protected-access
                                            for role in ("source", "target")] + [m.output_weights()[0]])
  for role, matrix in zip(("source", "target", "output"), read):
    np.testing.assert_array_equal(matrix, params[names[role]]["embedding"])
    assert matrix.shape == ((23 if role == "source" else cfg.target_vocab), 16), role
  # The roles each mode shares (docs/model.md), and no other: the matrices are drawn apart.
  shared = {"shared": {("source", "target"), ("source", "output"), ("target", "output")},
            "shared_inputs": {("source", "target")}, "tied_output": {("target", "output")},
            "separate": set()}[mode]
  matrices = dict(zip(("source", "target", "output"), read))
  for pair in (("source", "target"), ("source", "output"), ("target", "output")):
    same = matrices[pair[0]].shape == matrices[pair[1]].shape and np.array_equal(
        matrices[pair[0]], matrices[pair[1]])
    assert same == (pair in shared), pair


def test_learned_positions_reject_sequences_longer_than_max_len():
  too_long = jnp.ones((1, CFG_VARIANT.max_len + 1), jnp.int32)
  with pytest.raises(ValueError, match="max_len"):
    transformer.Transformer(CFG_VARIANT.model).apply({"params": _params(CFG_VARIANT)}, too_long,
                                                     too_long)
  with pytest.raises(ValueError, match="max_len"):
    transformer.init_cache(CFG_VARIANT.model, _params(CFG_VARIANT), INPUTS, CFG_VARIANT.max_len + 1)
  # Marian's positions are a table of max_len rows too (layers.halves_table).
  with pytest.raises(ValueError, match=r"decode length 17 exceeds max_len=16 of the halves "
                                       "position table"):
    transformer.init_cache(CFG_MARIAN.model, _params(CFG_MARIAN), INPUTS, CFG_MARIAN.max_len + 1)


# d_k == d_v and no attention dropout: the fused attention path applies.
CFG_FUSED = CFG.replace(d_v=8, attention_dropout_rate=0.0)


def _plain_forward(cfg):
  """jit(apply) with the config's kernels (kernels/choice.py) and without the intermediates
  collection, so the fused path may run."""
  model = transformer.Transformer(cfg.model, choice.plugins(cfg.model))
  return jax.jit(lambda p, i, t, *segments: model.apply({"params": p}, i, t, False, *segments))


def test_fused_attention_gives_the_reference_logits_and_gradients():
  params = _params(CFG_FUSED)
  reference_cfg = CFG_FUSED.replace(attention_impl="reference")
  real = np.asarray(TARGETS != 0)
  fused = np.asarray(_plain_forward(CFG_FUSED)(params, INPUTS, TARGETS))
  want = np.asarray(_plain_forward(reference_cfg)(params, INPUTS, TARGETS))
  np.testing.assert_allclose(fused[real], want[real], atol=1e-5, rtol=1e-5)

  def loss(cfg):
    def f(p):
      model = transformer.Transformer(cfg.model, choice.plugins(cfg.model))
      logits = model.apply({"params": p}, INPUTS, TARGETS)
      logp = jax.nn.log_softmax(logits)
      return -jnp.sum(jnp.take_along_axis(logp, TARGETS[..., None], -1)[..., 0] * real)
    return jax.jit(jax.grad(f))(params)

  for g, w in zip(jax.tree.leaves(loss(CFG_FUSED)), jax.tree.leaves(loss(reference_cfg))):
    np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-4)


def _pack(pairs, rows, length):
  """Pairs (source ids, target ids) -> rows of `rows` lists of pair indices, as arrays."""
  out = {k: np.zeros((len(rows), length), np.int32)
         for k in ("inputs", "targets", "inputs_segments", "targets_segments")}
  for r, members in enumerate(rows):
    ends = {"inputs": 0, "targets": 0}
    for s, i in enumerate(members, 1):
      for side, ids in zip(("inputs", "targets"), pairs[i]):
        start = ends[side]
        out[side][r, start:start + len(ids)] = ids
        out[f"{side}_segments"][r, start:start + len(ids)] = s
        ends[side] = start + len(ids)
  return {k: jnp.asarray(v) for k, v in out.items()}


@pytest.mark.parametrize("cfg", [CFG_FUSED, CFG_VARIANT], ids=["fused", "reference_variant"])
def test_packed_rows_give_each_sentence_its_unpacked_logits(cfg):
  rng = np.random.default_rng(3)
  lengths = [(4, 3), (2, 5), (5, 4), (3, 2), (1, 1)]
  pairs = [(list(rng.integers(3, 23, s - 1)) + [1], list(rng.integers(3, 23, t - 1)) + [1])
           for s, t in lengths]
  alone = _pack(pairs, [[i] for i in range(len(pairs))], 8)
  packed = _pack(pairs, [[0, 1], [2, 3, 4]], 14)
  params = _params(cfg)
  # The fused config runs without intermediates (fused attention); the variant
  # with them (the reference path, with its window and learned positions).
  if cfg is CFG_FUSED:
    fwd = lambda b, *seg: _plain_forward(cfg)(params, b["inputs"], b["targets"], *seg)
  else:
    fwd = lambda b, *seg: jax.jit(lambda p, i, t, *s: transformer.Transformer(cfg.model).apply(
        {"params": p}, i, t, False, *s, mutable=["intermediates"])[0])(
            params, b["inputs"], b["targets"], *seg)
  want = np.asarray(fwd(alone))
  got = np.asarray(fwd(packed, packed["inputs_segments"], packed["targets_segments"]))
  rows = {0: (0, 0), 1: (0, 3), 2: (1, 0), 3: (1, 4), 4: (1, 6)}     # pair -> (row, offset)
  for i, (row, start) in rows.items():
    t = lengths[i][1]
    np.testing.assert_allclose(got[row, start:start + t], want[i, :t], atol=1e-5, rtol=1e-5,
                               err_msg=f"pair {i}")
  # Without segment ids the same rows would attend across sentences: the test can fail.
  crossed = np.asarray(fwd(packed))
  assert np.abs(crossed[0, 3:8] - want[1, :5]).max() > 1e-3


def test_segments_must_come_in_pairs():
  seg = jnp.ones_like(TARGETS)
  with pytest.raises(ValueError, match="both"):
    transformer.Transformer(CFG_FUSED.model).apply({"params": _params(CFG_FUSED)}, INPUTS, TARGETS,
                                       False, None, seg)


# Section 5.4's dropout sites in one-layer CFG_VARIANT, in the order a forward pass
# reaches them, and the parameters whose zeroing removes exactly what each site
# drops: a site's input is a sub-layer's output (zero its last projection) or the
# sum of embeddings and positions (zero both tables; CFG_VARIANT has them apart).
DROPOUT_SITES = [
    ("source embeddings + positions", (), [("source_embedding",), ("source_positions",)]),
    ("encoder self-attention", ("encoder", "layers_0"),
     [("encoder", "layers_0", "self_attention", "out")]),
    ("encoder feed-forward", ("encoder", "layers_0"), [("encoder", "layers_0", "ffn", "wo")]),
    ("target embeddings + positions", (), [("target_embedding",), ("target_positions",)]),
    ("decoder self-attention", ("decoder", "layers_0"),
     [("decoder", "layers_0", "self_attention", "out")]),
    ("decoder cross-attention", ("decoder", "layers_0"),
     [("decoder", "layers_0", "cross_attention", "out")]),
    ("decoder feed-forward", ("decoder", "layers_0"), [("decoder", "layers_0", "ffn", "wo")]),
]


def _zeroed(params, path):
  """params with the subtree (or array) at `path` set to zeros."""
  *parents, last = path
  params = dict(params)
  node = params
  for name in parents:
    node[name] = dict(node[name])
    node = node[name]
  node[last] = jax.tree.map(jnp.zeros_like, node[last])
  return params


def test_dropout_sits_on_each_sublayer_output_and_on_the_embedding_sums():
  # Rate 1 at one site at a time (its output replaced by zeros, every other site
  # off) must equal the model with that site's input zeroed by its parameters:
  # LayerNorm(x + 0) for a sub-layer, zero encoder/decoder input for an embedding
  # sum. Dropout after the residual add gives LayerNorm(0) instead; dropout on the
  # embeddings alone leaves the positions; a missing site is never reached.
  cfg, params = CFG_VARIANT, _params(CFG_VARIANT)
  reached = []

  def forward(params, site):
    def drop_site(next_fun, args, kwargs, context):
      if not (isinstance(context.module, layers.Dropout) and context.method_name == "__call__"):
        return next_fun(*args, **kwargs)
      reached.append(context.module.path[:-1])                         # the owner's path
      index = len(reached) - 1
      return jnp.where(site == index, jnp.zeros_like(args[0]), next_fun(*args, **kwargs))
    with nn.intercept_methods(drop_site):
      return transformer.Transformer(cfg.model).apply({"params": params}, INPUTS, TARGETS)

  dropped = jax.jit(forward)
  plain = np.asarray(_forward(cfg)(params, INPUTS, TARGETS))
  for index, (name, owner, zero) in enumerate(DROPOUT_SITES):
    got = np.asarray(dropped(params, index))
    without = params
    for path in zero:
      without = _zeroed(without, path)
    want = np.asarray(_forward(cfg)(without, INPUTS, TARGETS))
    assert np.abs(want - plain).max() > 1e-3, name                     # the site matters
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=name)
  assert reached == [owner for _, owner, _ in DROPOUT_SITES], reached


def test_the_model_takes_a_model_config_and_names_the_fix_for_a_run_config():
  assert transformer.Transformer(CFG.model).config == CFG.model
  for make in (lambda: transformer.Transformer(CFG),
               lambda: transformer.init_params(CFG, jax.random.key(0)),
               lambda: transformer.init_cache(CFG, _params(CFG), INPUTS, 4)):
    with pytest.raises(TypeError, match="not a TransformerConfig: pass cfg.model"):
      make()


def test_published_models_options_change_what_they_say_and_nothing_else():
  """Each option of CFG_MARIAN, one at a time, against the paper's model with the same params."""
  params, base = _params(CFG_MARIAN), CFG_MARIAN.replace(
      activation="relu", attention_bias=False, output_bias=False, position_layout="interleaved",
      layer_norm_epsilon=1e-6)
  logits = lambda cfg, p: np.asarray(_forward(cfg)(p, INPUTS, TARGETS))
  # The same params without the attention and output biases.
  plain = {path: x for path, x in flax.traverse_util.flatten_dict(params).items()
           if path[-1] != "output_bias"
           and not (path[-1] == "bias" and path[-2] in ("query", "key", "value", "out"))}
  plain = flax.traverse_util.unflatten_dict(plain)
  want = logits(base, plain)
  # The output bias adds b to every position's logits.
  np.testing.assert_allclose(
      logits(base.replace(output_bias=True), {**plain, "output_bias": params["output_bias"]}),
      want + np.asarray(params["output_bias"]), atol=1e-5)
  # Every other option changes the logits.
  for field, value in [("activation", "swish"), ("position_layout", "halves"),
                       ("layer_norm_epsilon", 1e-1)]:
    assert np.abs(logits(base.replace(**{field: value}), plain) - want).max() > 1e-3, field
  # The halves layout is the interleaved one with the model dimension permuted
  # (docs/export.md, "The permutation"): permuting every weight that touches it gives
  # the same function.
  d = base.d_model
  order = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
  permuted = jax.tree_util.tree_map_with_path(lambda path, x: _permute(path, x, order), plain)
  np.testing.assert_allclose(logits(base.replace(position_layout="halves"), permuted), want,
                             atol=1e-5)


def _permute(path, x, order):
  """One parameter with the model dimension's features reordered by `order`."""
  names = [getattr(k, "key", None) for k in path]
  x = np.asarray(x)
  if names[-1] == "embedding" or names[-2].startswith("norm"):
    return x[..., order]                             # [vocab, d], [d]
  if names[-2] in ("query", "key", "value") or names[-2] == "wi" and names[-1] == "kernel":
    return x[order]                                  # [d, ...] inputs
  if names[-2] in ("out", "wo"):
    return x[..., order]                             # [..., d] outputs
  return x


def test_features_and_kernel_give_the_logits_with_the_output_bias():
  params = _params(CFG_MARIAN)
  hidden, kernel = transformer.Transformer(CFG_MARIAN.model).apply(
      {"params": params}, INPUTS, TARGETS, method=transformer.Transformer.features)
  assert hidden.shape[-1] == kernel.shape[-1] == CFG_MARIAN.d_model + 1
  np.testing.assert_allclose(np.asarray(hidden) @ np.asarray(kernel).T,
                             np.asarray(_forward(CFG_MARIAN)(params, INPUTS, TARGETS)), atol=1e-5)
