"""Mutation pass over the package's input checks: disable one check at a time, run the unit tests, restore.

    python scripts/mutate_checks.py              # every mutation (about 10 minutes on 2 cores)
    python scripts/mutate_checks.py "KV cache"   # only those whose name contains one of the words

A check that no test notices when it is disabled ("SURVIVED") has no test that can fail: add one. The files are
restored after each run, even when it is interrupted.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# (name, file, the line as it is, the line disabled)
MUTATIONS = [
    ('_checks.check_tokens: ids in vocab', 'attn_utils/_checks.py',
     'if vocab_size is not None and (lo < 0 or hi >= vocab_size):',
     'if False:'),
    ('_checks.check_tokens: lengths', 'attn_utils/_checks.py',
     '        if lo < 1 or hi > sizes["T"]:',
     '        if False:'),
    ('_checks.check_tokens: scope skip ignored (always check)', 'attn_utils/_checks.py',
     '    if values_checked() or (vocab_size is None and valid_lens is None):',
     '    if (vocab_size is None and valid_lens is None):'),
    ('_checks.check_lengths', 'attn_utils/_checks.py',
     '    if lo < minimum or hi > max_len:',
     '    if False:'),
    ('_checks.values_checked_scope does nothing', 'attn_utils/_checks.py',
     '    token = _VALUES_CHECKED.set(True)',
     '    token = _VALUES_CHECKED.set(False)'),
    ('_checks.check_same_device_dtype: dtype', 'attn_utils/_checks.py',
     '    if x.dtype != param.dtype:',
     '    if False:'),
    ('_checks.check_same_device_dtype: device', 'attn_utils/_checks.py',
     '    if x.device != param.device:',
     '    if False:'),
    ('masking.sequence_mask range', 'attn_utils/masking.py',
     '        if lo < 0 or hi > max_len:',
     '        if False:'),
    ('loss: target ids', 'attn_utils/training.py',
     '        if lo < 0 or hi >= sizes["V"]:',
     '        if False:'),
    ('loss: lengths', 'attn_utils/training.py',
     '        if len_lo < 0 or len_hi > sizes["T"]:',
     '        if False:'),
    ('loss: all zeros', 'attn_utils/training.py',
     '        if len_hi == 0:',
     '        if False:'),
    ('training loop: batch ids', 'attn_utils/training.py',
     '        if lo < 0 or (size is not None and hi >= size):',
     '        if False:'),
    ('training loop: batch lengths', 'attn_utils/training.py',
     '        if lo < 1 or hi > T:',
     '        if False:'),
    ('training loop: batch check removed', 'attn_utils/training.py',
     '            _check_batch(model, src, src_len, tgt, tgt_len)',
     '            pass'),
    ('training loop: bos_id vs vocabulary', 'attn_utils/training.py',
     '    check_token_id("bos_id", bos_id, model.tgt_vocab_size)',
     '    pass'),
    ('decoding: token id vs vocabulary', 'attn_utils/_checks.py',
     '    if vocab_size is not None and value >= vocab_size:',
     '    if False:'),
    ('decoding: vocabulary larger than model', 'attn_utils/decoding.py',
     '    if model_size is not None and len(vocab) > model_size:',
     '    if False:'),
    ('decoding: stop at <eos>', 'attn_utils/decoding.py',
     '                if bool(done.all()):',
     '                if False:'),
    ('decoding: eval mode restores each module', 'attn_utils/decoding.py',
     '            module.training = training',
     '            module.training = modes[0][1]'),
    ('encode: src value check', 'attn_utils/seq2seq.py',
     '        check_tokens("src", src, src_valid_lens, self.src_vocab_size)',
     '        pass'),
    ('step: tgt value check', 'attn_utils/seq2seq.py',
     '        check_tokens("tgt", tgt, vocab_size=self.tgt_vocab_size)',
     '        pass'),
    ('EncoderDecoder: GRU depths', 'attn_utils/seq2seq.py',
     '        if recurrent and encoder.num_layers != decoder.num_layers:',
     '        if False:'),
    ('GRU decoder: encoder hidden check', 'attn_utils/seq2seq.py',
     '        sizes = check_shape("enc.hidden", enc.hidden, (self.num_layers, "B", self.num_hiddens))',
     '        sizes = {}'),
    ('Bahdanau: src_valid_lens check', 'attn_utils/seq2seq.py',
     '        check_lengths("src_valid_lens", src_valid_lens, enc.outputs.shape[1])',
     '        pass'),
    ('KV cache: shape guard', 'attn_utils/multihead.py',
     '        if (sizes["B"], sizes["H"], sizes["D_h"]) != (B, H, D_h):',
     '        if False:'),
    ('KV cache: v like k', 'attn_utils/multihead.py',
     '        check_shape("kv_cache.append: v", v, ("B", "H", "T_new", "D_h"), sizes)',
     '        pass'),
    ('KV cache: dtype guard', 'attn_utils/multihead.py',
     '        if k.dtype != self.k.dtype or k.device != self.k.device:',
     '        if False:'),
    ('MHA: 3-D mask', 'attn_utils/multihead.py',
     '            if attn_mask.dim() not in (2, 4):',
     '            if False:'),
    ('MHA: is_causal with a cache', 'attn_utils/multihead.py',
     '        if is_causal and kv_cache is not None and len(kv_cache) > 0:',
     '        if False:'),
    ('MHA: input dtype/device', 'attn_utils/multihead.py',
     '        check_same_device_dtype(name, x, self.W_q.weight)',
     '        pass'),
    ('dot-product: is_causal needs T_q == T_k', 'attn_utils/attention.py',
     '    if is_causal and sizes["T_q"] != sizes["T_k"]:',
     '    if False:'),
    ('dot-product: is_causal ignored on the explicit path', 'attn_utils/attention.py',
     '        mask = causal if mask is None else mask & causal',
     '        mask = mask'),
    ('encoder: src longer than max_len', 'attn_utils/transformer.py',
     '        if src.shape[1] > max_len:',
     '        if False:'),
    ('transformer decoder: cross_kv count', 'attn_utils/transformer.py',
     '        if len(state.cross_kv) != len(self.blocks):',
     '        if False:'),
    ('transformer decoder: init_state lengths', 'attn_utils/transformer.py',
     '            check_lengths("src_valid_lens", src_valid_lens, sizes["T_src"])',
     '            pass'),
    ('transformer decoder: cross kv recomputed each step', 'attn_utils/transformer.py',
     '                X, self_w, cross_w = block(X, kv, state.src_valid_lens, cache, need_weights)',
     '                X, self_w, cross_w = block(X, state.enc_outputs, state.src_valid_lens, cache, need_weights)'),
    ('decoder block: is_causal not used', 'attn_utils/transformer.py',
     '            mask, is_causal = None, True',
     '            mask, is_causal = causal_mask(T, T, device=X.device), False'),
    ('FFN dtype/device', 'attn_utils/transformer.py',
     '        check_same_device_dtype("X", X, self.dense1.weight)',
     '        pass'),
    ('AddNorm dtype/device', 'attn_utils/transformer.py',
     '            check_same_device_dtype(name, t, self.ln.weight)',
     '            pass'),
    ('NW module dtype/device', 'attn_utils/attention.py',
     '            check_same_device_dtype(name, t, self.w)',
     '            pass'),
    ('additive dtype/device', 'attn_utils/attention.py',
     '            check_same_device_dtype(name, t, self.W_q.weight)  # else nn.Linear',
     '            pass  # else nn.Linear'),
    ('head view: finite weights', 'attn_utils/headview.py',
     '    bad = np.argwhere(~np.isfinite(w))',
     '    bad = np.argwhere(np.zeros_like(w, dtype=bool))'),
    ('head view: weights >= 0', 'attn_utils/headview.py',
     '    bad = np.argwhere(w < 0)',
     '    bad = np.argwhere(w < -1e9)'),
    ('head view: rows sum to 1 or 0', 'attn_utils/headview.py',
     '    bad = np.argwhere((np.abs(sums - 1.0) > sum_tol) & (sums != 0.0))',
     '    bad = np.argwhere(np.abs(sums - 1.0) > 1e9)'),
    ('head view: token counts', 'attn_utils/headview.py',
     '    if len(names) != count:',
     '    if False:'),
    ('head view: key tokens of cross-attention', 'attn_utils/headview.py',
     '        if T_q != T_k:',
     '        if False:'),
    ('head view: one example', 'attn_utils/headview.py',
     '        if a.shape[0] != 1:',
     '        if False:'),
]


def main(only: list[str]) -> int:
    results = []
    for name, rel, old, new in MUTATIONS:
        if only and not any(word in name for word in only):
            continue
        path = ROOT / rel
        text = path.read_text()
        if text.count(old) != 1:
            results.append((name, f"NOT APPLIED: the line occurs {text.count(old)} times"))
            print(*results[-1], sep=": ", flush=True)
            continue
        path.write_text(text.replace(old, new))
        try:
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                  "--ignore=tests/browser", "tests", "attn_utils"],
                                 cwd=ROOT, capture_output=True, text=True)
        finally:
            path.write_text(text)
        failed = [line[7:] for line in run.stdout.splitlines() if line.startswith("FAILED")][:1]
        verdict = ("caught by " + (failed[0][:90] if failed else f"exit code {run.returncode}")) if run.returncode \
            else "SURVIVED"
        results.append((name, verdict))
        print(*results[-1], sep=": ", flush=True)
    caught = sum(verdict.startswith("caught") for _, verdict in results)
    print(f"{caught} of {len(results)} disabled checks caught by a test")
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
