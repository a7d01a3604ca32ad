"""The bug codes the clinic can name: what each mistake does, and (one step further, for the hint) how to fix it."""

from __future__ import annotations

BUGS: dict[str, tuple[str, str]] = {
    "softmax-wrong-axis": (
        "the softmax runs over the queries instead of over the keys",
        "normalise over the last axis, the keys: torch.softmax(scores, dim=-1)",
    ),
    "missing-scale": (
        "the scores are not divided by √d",
        "divide Q Kᵀ by math.sqrt(d), d being the width of the queries and keys",
    ),
    "scale-by-d": (
        "the scores are divided by d instead of √d",
        "divide by math.sqrt(d), not by d",
    ),
    "inverted-mask": (
        "the mask is inverted: padding is attended and the valid keys are ignored",
        "mask the keys at positions j >= valid_len, keep those before it",
    ),
    "mask-fill-zero": (
        "masked scores are set to 0 instead of a very negative number, so padding still gets weight",
        "fill the masked scores with float('-inf') (or a very negative number such as -1e9) before the softmax",
    ),
    "empty-row-uniform": (
        "a query with no valid key gets uniform weights over the padding instead of all-zero weights",
        "after the softmax, set the weights of queries with valid_len == 0 to 0",
    ),
    "empty-row-nan": (
        "a query with no valid key gets NaN weights (a softmax of a row that is all -inf)",
        "give such rows finite scores before the softmax and set their weights to 0 after it",
    ),
    "valid-lens-ignored": (
        "valid_lens is never applied: every key is attended, padding included",
        "build the mask from valid_lens (j < valid_len) and apply it to the scores",
    ),
    "causal-leak": (
        "a query can see keys after its own position",
        "allow key j for query i only when j <= i + (T_k - T_q)",
    ),
    "causal-no-diagonal": (
        "a query cannot see its own position",
        "use <= rather than < : query i may attend key i itself",
    ),
    "causal-top-left": (
        "with fewer queries than keys, the mask is aligned top-left instead of bottom-right",
        "the queries are the last T_q positions: allow j <= i + (T_k - T_q)",
    ),
    "pe-sin-cos-swapped": (
        "sine and cosine are in each other's columns",
        "put sin in the even columns (0, 2, 4, …) and cos in the odd ones",
    ),
    "pe-wrong-exponent": (
        "the frequencies fall too slowly from pair to pair: the slowest pair repeats after far fewer positions than "
        "it should, so distant positions get similar vectors",
        "pair j (columns 2j and 2j+1) uses the frequency 1 / 10000^(2j/d)",
    ),
    "nw-wrong-sign": (
        "the kernel grows with distance: exp(+(x - x_i)² / 2σ²) instead of exp(-(x - x_i)² / 2σ²)",
        "use the minus sign: the softmax of -(x - x_i)² / (2σ²)",
    ),
    "not-implemented": (
        "the function is not written yet: it raises NotImplementedError",
        "replace the `raise NotImplementedError` by your code, then run the check again",
    ),
    "scale-by-d-model": (
        "each head's weights are flatter than the reference's: its scores are divided by √d_model, although a "
        "head's dot products have only d_head = d_model / num_heads terms",
        "divide each head's scores by math.sqrt(d_model // num_heads)",
    ),
    "heads-interleaved": (
        "the reshape deals the features out to the heads in turn (head i gets features i, i + H, i + 2H, …) "
        "instead of giving each head a block of D_h neighbouring features",
        "reshape (B, T, D) to (B, T, H, D_h), not to (B, T, D_h, H): head i owns features i·D_h to (i + 1)·D_h - 1",
    ),
    "heads-no-transpose": (
        "(B, T, D) is reshaped straight into (B, H, T, D_h) (or merged back) without swapping the time and head "
        "axes, so a 'head' holds pieces of several positions",
        "reshape to (B, T, H, D_h) and then .transpose(1, 2); to merge, .transpose(1, 2) before the reshape",
    ),
    "heads-batch-order": (
        "the B·H rows are ordered head by head (row i·B + b) instead of sequence by sequence (row b·H + i), so "
        "per-sequence lengths repeated for each head land on the wrong rows",
        "permute to (B, H, T, D_h) before merging the first two axes: row b·H + i is head i of sequence b",
    ),
    "valid-lens-repeat": (
        "valid_lens is repeated with .repeat(H) instead of .repeat_interleave(H), so heads get the lengths of "
        "other sequences",
        "use torch.repeat_interleave(valid_lens, num_heads, dim=0): row b·H + i is head i of sequence b",
    ),
    "missing-output-projection": (
        "the heads are concatenated but never mixed by the output projection W_o",
        "return self.W_o(concatenated heads)",
    ),
    "additive-missing-tanh": (
        "the weights do not depend on the query: without a nonlinearity, w_vᵀ(W_q q + W_k k) splits into a query "
        "term, the same for every key, and a key term",
        "apply torch.tanh to W_q q + W_k k before w_v",
    ),
    "online-no-rescale": (
        "when the running maximum grows, the sums of the earlier blocks are not brought to the new maximum, so "
        "earlier blocks keep too much weight",
        "multiply both the running sum and the running output by torch.exp(m_old - m_new) before adding the block",
    ),
    "online-rescale-inverted": (
        "the running sum is rescaled the wrong way: when the maximum grows, the earlier blocks are multiplied by a "
        "factor above 1",
        "the factor is torch.exp(m_old - m_new), at most 1: the earlier terms were computed with a smaller maximum",
    ),
    "online-overflow": (
        "the exponentials are taken without subtracting the running maximum, so large scores overflow to inf and "
        "the output becomes NaN",
        "subtract the running maximum before torch.exp, and rescale the running sums when it grows",
    ),
    "online-partial-block-dropped": (
        "the last block is skipped when the block size does not divide the number of keys",
        "loop over range(0, T_k, block_size): slicing past the end simply gives a shorter last block",
    ),
    "rope-wrong-pairing": (
        "features are rotated in pairs (j, j + D_h/2), the 'rotate-half' layout of GPT-NeoX and Hugging Face's "
        "Llama, instead of neighbours (2j, 2j+1) as au.apply_rope, RoFormer and Meta's Llama code do; both layouts "
        "are conventions, but weights only work in the layout they were trained with",
        "rotate the pair (x[..., 2j], x[..., 2j+1]), as au.apply_rope does",
    ),
    "rope-wrong-frequency": (
        "the frequencies fall too slowly from pair to pair: every pair after the first turns too fast, the "
        "slowest one far too fast",
        "θ_j = base ** (-2j / D_h) for j = 0, …, D_h/2 - 1, i.e. base ** (-torch.arange(0, D_h, 2) / D_h)",
    ),
    "rope-wrong-direction": (
        "the rotation turns the other way (by -m θ_j): scores still depend only on the offset, but with the "
        "opposite sign to the package and to pretrained models",
        "x_even' = x_even cos - x_odd sin and x_odd' = x_even sin + x_odd cos",
    ),
    "rope-sin-cos-swapped": (
        "sine and cosine are swapped, which is no rotation at all: the vectors change length",
        "x_even' = x_even cos - x_odd sin and x_odd' = x_even sin + x_odd cos",
    ),
    "temperature-inverted": (
        "the logits are multiplied by the temperature instead of divided by it",
        "use softmax(logits / temperature)",
    ),
    "temperature-after-softmax": (
        "the temperature is applied to the probabilities, and the renormalisation undoes it: it has no effect",
        "divide the logits by the temperature before the softmax",
    ),
    "top-k-off-by-one": (
        "top-k keeps one token too few or too many",
        "keep the tokens whose probability is at least the k-th largest: probs.topk(k, dim=-1).values[:, -1:]",
    ),
    "top-p-excludes-crossing": (
        "top-p drops the token that brings the kept mass up to p, and keeps nothing at all when the most likely "
        "token alone has more than p",
        "keep a token when the mass of the tokens more likely than it is below p: cumsum - p_token < top_p",
    ),
    "top-p-unsorted": (
        "top-p adds up the probabilities in vocabulary order instead of from the most likely token down",
        "sort the probabilities in descending order before the cumulative sum, then scatter the mask back",
    ),
    "filters-wrong-order": (
        "top-p is applied before top-k, so the nucleus is measured on the whole distribution",
        "apply the temperature, then top-k, renormalise, and then top-p",
    ),
    "not-renormalised": (
        "the filtered probabilities are not renormalised: the rows no longer sum to 1",
        "divide by probs.sum(dim=-1, keepdim=True) after filtering",
    ),
    "patches-no-permute": (
        "the images are reshaped straight to (B, N, C·P·P), which cuts them into strips of pixel rows, not "
        "square patches",
        "reshape to (B, C, S/P, P, S/P, P), permute to (B, S/P, S/P, C, P, P), then reshape to (B, N, C·P·P)",
    ),
    "patches-column-order": (
        "the patches are numbered column by column instead of row by row",
        "put the axis of patch rows before the axis of patch columns: .permute(0, 2, 4, 1, 3, 5)",
    ),
    "patch-pixels-transposed": (
        "the pixels inside each patch are flattened column by column instead of row by row",
        "keep each patch's pixel rows before its pixel columns: .permute(0, 2, 4, 1, 3, 5)",
    ),
    "patch-channels-last": (
        "each patch is flattened with the channels last, (P, P, C), instead of first, (C, P, P), the order of a "
        "Conv2d weight and of F.unfold",
        "permute to (B, S/P, S/P, C, P, P) before the last reshape",
    ),
    "pooling-includes-padding": (
        "the mean runs over every position, padding included",
        "weight the tokens by attention_mask and divide by the number of real tokens",
    ),
    "pooling-divides-by-length": (
        "the real tokens are summed, but divided by the padded length T instead of their number",
        "divide by attention_mask.sum(dim=1, keepdim=True)",
    ),
    "pooling-cls-only": (
        "the first token's vector is returned instead of the mean of the real tokens",
        "average the vectors of the real tokens",
    ),
}
"""The bug codes the clinic can name, each mapped to a pair of sentences (what is wrong, how to fix it)."""

BUGS.update({
    "mask-off-by-one": (
        "the mask is off by one: each query attends one key more (or fewer) than its valid length",
        "key j is valid for a query when j < valid_len (not <=, and counting from 0)",
    ),
    "mask-fill-too-small": (
        "the masked scores are not pushed far enough down, so the padding keeps some weight",
        "fill the masked scores with float('-inf') or torch.finfo(scores.dtype).min, not a small number",
    ),
    "mask-wrong-keys": (
        "the queries attend other keys than their valid ones",
        "build the mask from valid_lens as arange(T_k) < valid_len, one row per query, and apply it to the scores",
    ),
    "scale-inverted": (
        "the scores are multiplied by √d instead of divided by it",
        "divide Q Kᵀ by math.sqrt(d)",
    ),
    "scale-wrong": (
        "the scores are scaled by the wrong factor",
        "divide Q Kᵀ by math.sqrt(d), d being the width of each head's queries and keys (not a constant)",
    ),
    "causal-reversed": (
        "the mask points the wrong way: a query sees the keys after its position instead of those before it",
        "allow key j for query i when j <= i + (T_k - T_q): the lower triangle, torch.tril, not torch.triu",
    ),
    "mask-inverted-convention": (
        "the mask is True where attention is forbidden (the convention of nn.MultiheadAttention's attn_mask and "
        "key_padding_mask), the opposite of what is asked: True where query i may attend key j",
        "return the complement, ~mask: True where attention is allowed (the convention of "
        "F.scaled_dot_product_attention and of au.causal_mask)",
    ),
    "mask-additive": (
        "the mask is additive (0 where allowed, -inf where not), the convention of "
        "nn.Transformer.generate_square_subsequent_mask, but a bool mask is asked for",
        "return mask == 0, or build the bool mask directly: True where query i may attend key j",
    ),
    "mask-not-bool": (
        "the mask holds 0 and 1 numbers instead of booleans",
        "return a bool tensor (.bool()), True where query i may attend key j",
    ),
    "nw-wrong-width": (
        "the kernel's width is wrong: the squared distance is divided by something other than 2σ²",
        "divide (x - x_i)² by 2 * sigma ** 2",
    ),
    "pe-halves-layout": (
        "the sines fill the first half of the columns and the cosines the second (the layout of tensor2tensor and "
        "of some libraries), instead of alternating",
        "interleave them: P[:, 0::2] = sin(angles), P[:, 1::2] = cos(angles)",
    ),
    "rope-positions-shifted": (
        "the positions are counted from 1 (or another start), so the first position is already turned",
        "position m of x[..., m, :] turns by m θ_j with m = 0, 1, …, T - 1",
    ),
    "alibi-slopes-off-by-one": (
        "the slopes start at 2^0 = 1 instead of 2^(-8/H): the exponents run from 0 instead of 1",
        "slope i (i = 1, …, H) is 2 ** (-8 * i / H)",
    ),
    "alibi-slopes-not-power-of-two": (
        "when H is not a power of two, the slopes are the plain geometric sequence 2^(-8i/H) instead of Press et "
        "al.'s rule",
        "take the slopes of the largest power of two below H, then every other slope of the next power of two",
    ),
    "alibi-slopes-reversed": (
        "the slopes are in increasing order: the first head gets the smallest slope instead of the largest",
        "slope i (i = 1, …, H) is 2 ** (-8 * i / H), decreasing with i",
    ),
    "alibi-slopes-wrong-ratio": (
        "the slopes form a geometric sequence with the wrong start or ratio",
        "slope i (i = 1, …, H) is 2 ** (-8 * i / H): start and ratio both 2^(-8/H)",
    ),
    "gqa-heads-tiled": (
        "key/value heads are repeated with .repeat (tiled: query head i uses key/value head i % G) instead of "
        ".repeat_interleave (query head i uses head i // (H/G))",
        "use k.repeat_interleave(H // G, dim=1), and the same for v",
    ),
    "gqa-one-kv-head": (
        "every query head uses the first key/value head",
        "query head i uses key/value head i // (H / G): repeat_interleave(H // G, dim=1)",
    ),
    "gqa-wrong-group": (
        "query heads are matched with the wrong key/value heads",
        "query head i uses key/value head i // (H / G): repeat_interleave(H // G, dim=1)",
    ),
    "kv-cache-not-appended": (
        "the cache is overwritten instead of extended, so each new token attends only to itself",
        "concatenate the new key and value to the cache along the time axis (dim=2 in (B, H, T, D_h))",
    ),
    "kv-cache-misses-new-token": (
        "the new token attends to the cache before its own key and value are added, so it never sees itself",
        "append the new key and value to the cache first, then attend over the whole cache",
    ),
    "kv-cache-top-left-mask": (
        "a causal mask aligned top-left (is_causal=True, or tril of a (1, t) matrix) lets the one new query see only "
        "the first key",
        "no mask is needed for one new token: it may see every cached position; for several, use "
        "au.causal_mask(T_new, T_past + T_new) (bottom-right)",
    ),
    "online-wrong-combination": (
        "the blocks are combined wrongly: the output depends on the block size",
        "keep a running maximum, sum and output, and rescale the sum and the output by exp(m_old - m_new)",
    ),
    "temperature-wrong": (
        "the kept tokens are right, but their probabilities are not softmax(logits / temperature) renormalised",
        "divide the logits by the temperature before the softmax, and renormalise over the kept tokens",
    ),
    "kept-set-wrong": (
        "the filters keep the wrong set of tokens",
        "keep the top_k most likely tokens, then the smallest set of most likely ones whose mass reaches top_p",
    ),
    "patch-shape": (
        "the patches have the wrong shape",
        "return (B, N, C·P·P): N = (S/P)² patches, each flattened channel first",
    ),
    "patch-pixels-order": (
        "each patch holds the right pixels, but flattened in another order than (channel, row, column)",
        "permute to (B, S/P, S/P, C, P, P) before the last reshape",
    ),
    "patches-wrong-pixels": (
        "the patches are not P × P squares of the image: some hold pixels of several squares",
        "reshape to (B, C, S/P, P, S/P, P), permute to (B, S/P, S/P, C, P, P), then reshape to (B, N, C·P·P)",
    ),
    "pooling-wrong-positions": (
        "the sentence vector weighs the wrong positions",
        "average the vectors of the real tokens: weight by attention_mask, divide by its sum",
    ),
    "last-token-padding": (
        "the vector of the last position is taken, which is padding in a right-padded row",
        "take, in each row, the last position where attention_mask is 1",
    ),
    "last-token-assumes-right-padding": (
        "the last real token is found as attention_mask.sum() - 1, which is right only when the padding is on the "
        "right (not with left padding, common for decoder-only models)",
        "find the last position where attention_mask is 1: T - 1 - attention_mask.flip(1).argmax(1)",
    ),
    "last-token-off-by-one": (
        "the position after the last real token is taken (attention_mask.sum() instead of .sum() - 1)",
        "the last real token of a right-padded row is at attention_mask.sum(1) - 1",
    ),
    "last-token-wrong-position": (
        "the vectors are taken at other positions than each row's last real token",
        "find the last position where attention_mask is 1: T - 1 - attention_mask.flip(1).argmax(1)",
    ),
    "cls-last-token": (
        "the last position is taken instead of the class token, which is the first",
        "return hidden[:, 0]",
    ),
    "cls-mean": (
        "the mean over the positions is taken instead of the class token",
        "return hidden[:, 0]",
    ),
    "cls-wrong-axis": (
        "the first sequence of the batch is taken (hidden[0]) instead of every sequence's first position",
        "return hidden[:, 0]: index the time axis, not the batch axis",
    ),
})

# What the clinic reports when no named mistake explains a failure: the invariant that the output breaks, which every
# correct function of the check's kind satisfies. Their words state the symptom; a cause is given only as what the
# symptom is consistent with.
BUGS.update({
    "output-ignores-queries": (
        "the output does not depend on the queries",
        "the weights must come from comparing each query with each key: check that the queries reach the scores, "
        "and what happens between the scores and the softmax",
    ),
    "function-raised": (
        "your function raised an error instead of returning",
        "run your function on the input shown and read the line the error points to: print the shapes and dtypes of "
        "the tensors it uses",
    ),
    "wrong-shape": (
        "the output has the wrong shape",
        "compare the shape of each intermediate tensor with the one in the docstring, on the input shown",
    ),
    "wrong-type": (
        "the function does not return a tensor",
        "return the tensor the docstring describes",
    ),
    "wrong-dtype": (
        "the output is not a floating-point tensor",
        "keep the dtype of the inputs: do not round or convert the output to integers",
    ),
    "non-finite-output": (
        "the output has NaN or ±inf where the expected output is finite",
        "find where the first NaN or inf appears (print the intermediate tensors on the input shown): a softmax of a "
        "row whose scores are all -inf, or a number the dtype cannot hold",
    ),
    "batch-mixing": (
        "the output of one sequence changes when another sequence of the batch changes",
        "every sequence must be computed from its own inputs only: check each reshape, view and transpose (does it "
        "keep the batch axis first?) and that masks and lengths are indexed by the sequence they belong to",
    ),
    "rows-not-normalised": (
        "the weights of a query do not sum to 1 over the keys it may see",
        "normalise over the keys a query may see: mask the scores before the softmax (not the weights after it), "
        "and take the softmax over the last axis",
    ),
    "weights-on-masked-keys": (
        "a query gives weight to keys it may not see",
        "build the mask as j < valid_len for key j, and fill the masked scores before the softmax with "
        "torch.finfo(scores.dtype).min",
    ),
    "empty-row-not-zero": (
        "a query with no valid key does not get all-zero weights",
        "after the softmax, set the weights of the masked keys to 0: a query with no valid key then gets all zeros",
    ),
    "output-outside-values": (
        "an output row lies outside the range of the values: attention's output is a weighted average of the "
        "values, with nonnegative weights that sum to 1",
        "check that the weights are nonnegative and sum to 1 for each query before they multiply the values",
    ),
    "pooling-sees-padding": (
        "the sentence vector changes when a padding position changes",
        "weight each position by attention_mask, so that padding contributes nothing, and divide by the number of "
        "real tokens",
    ),
    "rope-not-rotation": (
        "the output is not a rotation of the input: a pair of features changes its length, or position 0 changes",
        "rotate each pair (x[2j], x[2j+1]) by the angle m·θ_j: x' = (x cos - y sin, x sin + y cos), leaving the "
        "pair's length unchanged",
    ),
    "patch-values-changed": (
        "the patches do not hold the image's pixels, each once: some pixel value is missing, repeated or changed",
        "only rearrange the pixels (reshape, permute, unfold): never add, average or drop any",
    ),
    "causal-wrong-keys": (
        "a query does not see exactly the keys at or before its own position",
        "query i is at position i + (T_k - T_q): allow key j when j <= i + (T_k - T_q)",
    ),
    "rope-offset-inconsistent": (
        "rows rotated at an offset are not the rows that the same vectors get further down a sequence rotated from "
        "position 0",
        "row m of x is at position offset + m: turn it by (offset + m)·θ_j, e.g. positions = torch.arange(offset, "
        "offset + T)",
    ),
    "alibi-bias-not-zero-at-own-key": (
        "the bias of a query on its own key is not 0",
        "query i sits at position i + T_k - T_q: its distance to key j is |i + T_k - T_q - j|, 0 on its own key",
    ),
    "alibi-bias-positive": (
        "the bias is positive somewhere: ALiBi only subtracts, more the farther the key",
        "build the bias as -slopes[h] · |i - j|, never positive",
    ),
    "input-modified": (
        "the function changes its input tensors in place",
        "leave the inputs as they are: use the out-of-place operation (masked_fill, not masked_fill_; x = x + y, "
        "not x += y), or work on a copy (x.clone())",
    ),
})

# Causal linear attention (chapter 14).
BUGS.update({
    "linear-attention-no-normaliser": (
        "the output is φ(q)ᵀ S without the normaliser: it is not divided by φ(q)·z, so the weights φ(q)·φ(k_j) do "
        "not sum to 1 and the output grows with the number of tokens",
        "divide φ(q_t)ᵀ S_t by φ(q_t)·z_t, where z_t = Σ_{j≤t} φ(k_j) is the running sum of the key features",
    ),
    "linear-attention-not-causal": (
        "a position reads sums over every position of the sequence (S or z, or both), not over the prefix up to "
        "itself: it sees the future",
        "use prefix sums, S_t = Σ_{j≤t} φ(k_j) v_jᵀ and z_t = Σ_{j≤t} φ(k_j) (a running state in a loop, or "
        "torch.cumsum over the time axis), for the numerator and the normaliser alike",
    ),
    "linear-attention-negative-features": (
        "the feature map can go negative (the identity, or elu without the + 1), so kernel values φ(q)·φ(k) can be "
        "negative and the normaliser close to 0",
        "use φ(x) = F.elu(x) + 1, which is positive, for the queries and the keys",
    ),
    "linear-attention-state-not-reset": (
        "the state (S, z) is not reset: it carries over from one sequence of the batch to the next, or from one call "
        "to the next",
        "start every sequence, and every call, from S = 0 and z = 0 (create them inside the function, per sequence, "
        "or keep a batch axis in the state)",
    ),
})

# The bugs of the checks of RoPE at a position offset and of ALiBi's bias matrix (chapter 12).
BUGS.update({
    "rope-offset-ignored": (
        "the offset is ignored: every call turns its rows as positions 0, 1, …, so in cached decoding each new query "
        "and key is rotated as if it were the first position",
        "count the positions from the offset: positions = torch.arange(offset, offset + T)",
    ),
    "rope-offset-one-position": (
        "every row is turned as position offset, as if each call held one position: with several rows (a prompt), "
        "all of them get the same angle",
        "give row m the position offset + m: positions = torch.arange(offset, offset + T), not a single offset",
    ),
    "rope-offset-wrong-sign": (
        "the positions run backwards from the offset (arange(T) - offset): the cached positions are subtracted "
        "instead of added",
        "add the offset: positions = offset + torch.arange(T)",
    ),
    "alibi-bias-sign": (
        "the bias has the wrong sign: it adds slopes · |i - j|, so farther keys get more weight, not less",
        "subtract: bias = -slopes[:, None, None] * distance",
    ),
    "alibi-bias-queries-first": (
        "the queries are placed at positions 0 to T_q - 1 instead of the last T_q of the T_k positions: with a "
        "cache (T_q < T_k) each query measures its distances from the wrong position",
        "query i sits at position i + T_k - T_q: query_pos = torch.arange(T_k - T_q, T_k)",
    ),
    "alibi-bias-signed-distance": (
        "the distance is i - j without its absolute value: keys after the query get a positive bias (harmless "
        "under a causal mask, wrong for a bias that is documented as symmetric)",
        "take the absolute distance, (query_pos - key_pos).abs()",
    ),
    "alibi-bias-wrong-index": (
        "the bias is built from one index only (the key's or the query's), not from the distance between them",
        "build it from the distance between the positions: -slopes[h] · |(i + T_k - T_q) - j|",
    ),
    "alibi-bias-one-slope": (
        "every head uses the same slope: the heads do not get their own slopes",
        "broadcast the slopes over the heads: slopes[:, None, None] * distance[None]",
    ),
    "alibi-bias-wrong-slopes": (
        "the bias of each head does not fall by that head's slope per position",
        "multiply the distance by slopes[h] itself (no square, no factor, no other head's slope): "
        "bias = -slopes[:, None, None] * distance",
    ),
})

# The class token of sequences padded on either side (chapters 10 and 11).
BUGS.update({
    "cls-assumes-right-padding": (
        "the class token is taken at position 0, which holds padding when a sequence is padded on the left",
        "take each sequence's first real token: hidden[torch.arange(B), attention_mask.long().argmax(1)]",
    ),
    "cls-first-padding": (
        "the vector is taken at the first padding position instead of the first real token",
        "take the first position where attention_mask is 1, not 0: attention_mask.long().argmax(1)",
    ),
})

# A decoding step whose cache already holds a prompt (chapter 8).
BUGS.update({
    "kv-cache-prefill-ignored": (
        "the keys and values already in the cache (a prompt's) are ignored: the step attends only to the positions "
        "it cached itself",
        "append the new key and value to cache['k'] and cache['v'] as they are given (they may already hold "
        "positions), and attend to all of them",
    ),
})
