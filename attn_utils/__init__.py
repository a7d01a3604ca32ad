"""attn_utils: the shared package of the course *Attention, from Nadaraya–Watson to the Transformer*.

Organised by concept: masking, attention, multi-head attention, positional encoding (sinusoidal, RoPE, ALiBi),
linear attention, seq2seq models, the Transformer, the Vision Transformer, data, training, decoding, metrics,
plotting and profiling.
Data flows one way: data -> models -> training -> decoding -> metrics and plotting.

Shape letters, used in every docstring and comment:

=========  ==========================================================
``B``      batch size
``T_q``    number of queries (target positions)
``T_k``    number of keys and values (source positions)
``T``      sequence length when queries and keys are the same sequence
``D``      model width (query and key width for dot-product attention)
``D_v``    value width
``H``      number of heads
``H_kv``   number of key/value heads (grouped-query attention; ``H`` by default)
``D_h``    width of one head, ``D // H``
``L``      number of layers
``V``      vocabulary size
``C``      image channels
``S``      image side in pixels (square images, ``S × S``)
``P``      patch side in pixels
``N``      patches per image, ``(S // P) ** 2``
``K``      number of classes
=========  ==========================================================

Masks follow :func:`torch.nn.functional.scaled_dot_product_attention`: ``True`` means *may attend*.
Scores before the softmax are ``attn_scores``; weights after it are ``attn_weights``.
"""

from __future__ import annotations

from . import clinic, experiments, threads
from .attention import (
    KERNELS,
    SDPA_HAS_GQA,
    AdditiveAttention,
    DotProductAttention,
    NWKernelRegression,
    dot_product_attention,
    nadaraya_watson,
)
from .book import direction, glue
from .data import (
    SOURCES,
    TATOEBA_SHA1,
    TATOEBA_URL,
    RegressionData,
    TranslationBatch,
    TranslationData,
    Vocab,
    default_cache_dir,
    download,
    encode_sentences,
    load_translation,
    make_regression_data,
    preprocess_text,
    regression_target,
    truncate_pad,
)
from .decoding import (
    STRATEGIES,
    BeamResult,
    DecodeResult,
    Translation,
    beam_search,
    eval_mode,
    evaluate_bleu,
    evaluate_lm_bleu,
    evaluate_perplexity,
    generate,
    greedy_decode,
    greedy_generate,
    lm_translate,
    predict,
    sample,
    sampling_probs,
    translate,
)
from .environment import REPOSITORY_URL, EnvironmentInfo, EnvironmentMismatch, check_environment, setup_notebook
from .experiments import Repeats, compare, plot_band, repeat
from .grammar import LANGUAGES, PROBES, generate_long_pairs, generate_pairs, is_grammatical
from .heads import ablate_heads, attention_mass, composition_score, copying_score, head_circuits, offset_targets
from .headview import HeadView, head_view
from .linear import (
    IGNORE_INDEX,
    LinearAttentionState,
    LinearMultiHeadAttention,
    LinearStateCache,
    associative_recall,
    draw_random_features,
    elu_feature_map,
    kernel_attention,
    linear_attention,
    linear_attention_step,
    positive_random_features,
)
from .lm_data import LANG_TAGS, LM_TASKS, SEP, LMBatch, LMData, make_lm_data
from .masking import attention_mask, causal_mask, masked_softmax, sequence_mask, sliding_window_mask
from .metrics import bleu, corpus_bleu
from .multihead import KVCache, MultiHeadAttention
from .plotting import live_slider, plot_losses, show_heatmaps, static_slider
from .positional import (
    ROPE_SCALINGS,
    PositionalEncoding,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rescale_rope,
    rope_attention_factor,
    rope_frequencies,
    sinusoidal_encoding,
)
from .pretrained import (
    MINILM_SHA256,
    BertConfig,
    BertEmbeddings,
    BertEncoder,
    BertOutput,
    TokenBatch,
    checkpoint_names,
    in_batch_contrastive_loss,
    load_bert_weights,
    load_minilm,
    load_tokenizer,
    mean_pool,
    minilm_path,
    relation_kl,
    sentence_embeddings,
    sha256_file,
    tokenize,
    value_relation,
)
from .profiling import can_measure_memory, peak_memory, time_each, time_it
from .seq2seq import (
    BahdanauDecoder,
    Decoder,
    DecoderOutput,
    Encoded,
    Encoder,
    EncoderDecoder,
    EncoderOutput,
    GRUEncoder,
    Seq2SeqDecoder,
)
from .threads import ThreadChoice, adapt_cpu_threads, use_cpu_threads
from .training import (
    TrainHistory,
    progress_bar,
    sequence_cross_entropy,
    set_seed,
    train_classifier,
    train_lm,
    train_seq2seq,
    try_gpu,
)
from .transformer import (
    ACTIVATIONS,
    ATTENTION,
    POSITIONAL,
    AddNorm,
    DecoderOnlyTransformer,
    GPTConfig,
    LMState,
    PositionWiseFFN,
    PreNormBlock,
    TransformerConfig,
    TransformerDecoder,
    TransformerDecoderBlock,
    TransformerDecoderState,
    TransformerEncoder,
    TransformerEncoderBlock,
    make_gpt,
    make_transformer,
)
from .vit import (
    DigitsData,
    ImageSplit,
    PatchEmbedding,
    VisionTransformer,
    ViTConfig,
    accuracy,
    load_digits_split,
    make_vit,
    mean_attention_distance,
    patchify,
)

__version__ = "0.5.0"

__all__ = [
    # masking
    "sequence_mask", "causal_mask", "sliding_window_mask", "attention_mask", "masked_softmax",
    # attention
    "KERNELS", "SDPA_HAS_GQA", "nadaraya_watson", "NWKernelRegression", "AdditiveAttention", "dot_product_attention",
    "DotProductAttention",
    # multi-head
    "KVCache", "MultiHeadAttention",
    # positional
    "sinusoidal_encoding", "PositionalEncoding", "rope_frequencies", "apply_rope", "RotaryEmbedding", "alibi_slopes",
    "alibi_bias", "ROPE_SCALINGS", "rope_attention_factor", "rescale_rope",
    # seq2seq
    "EncoderOutput", "DecoderOutput", "Encoded", "Encoder", "Decoder", "EncoderDecoder", "GRUEncoder", "Seq2SeqDecoder",
    "BahdanauDecoder",
    # transformer
    "TransformerConfig", "PositionWiseFFN", "AddNorm", "TransformerEncoderBlock", "TransformerDecoderBlock",
    "TransformerEncoder", "TransformerDecoder", "TransformerDecoderState", "make_transformer",
    # decoder-only
    "ACTIVATIONS", "POSITIONAL", "ATTENTION", "GPTConfig", "PreNormBlock", "LMState", "DecoderOnlyTransformer",
    "make_gpt",
    # data
    "RegressionData", "regression_target", "make_regression_data", "preprocess_text", "Vocab", "truncate_pad",
    "encode_sentences", "TranslationBatch", "TranslationData", "load_translation", "download", "default_cache_dir",
    "SOURCES", "TATOEBA_URL", "TATOEBA_SHA1", "PROBES", "generate_pairs", "generate_long_pairs",
    "LANGUAGES", "is_grammatical",
    # language-modelling data
    "SEP", "LANG_TAGS", "LM_TASKS", "LMBatch", "LMData", "make_lm_data",
    # training
    "set_seed", "try_gpu", "sequence_cross_entropy", "TrainHistory", "train_seq2seq", "train_lm", "train_classifier",
    "progress_bar",
    # decoding
    "eval_mode", "DecodeResult", "greedy_decode", "Translation", "translate", "evaluate_bleu",
    "sampling_probs", "sample", "greedy_generate", "BeamResult", "beam_search", "STRATEGIES", "generate",
    "lm_translate", "evaluate_lm_bleu", "evaluate_perplexity", "predict", "accuracy",
    # metrics
    "bleu", "corpus_bleu",
    # plotting
    "show_heatmaps", "plot_losses", "static_slider", "live_slider",
    # interactive head view
    "head_view", "HeadView",
    # the book
    "glue", "direction",
    # repeated experiments
    "experiments", "Repeats", "repeat", "compare", "plot_band",
    # the Vision Transformer and its digits (chapter 10)
    "ViTConfig", "patchify", "PatchEmbedding", "VisionTransformer", "make_vit", "ImageSplit", "DigitsData",
    "load_digits_split", "mean_attention_distance",
    # a pretrained encoder (chapter 11)
    "MINILM_SHA256", "BertConfig", "BertEmbeddings", "BertEncoder", "BertOutput", "TokenBatch", "checkpoint_names",
    "load_bert_weights", "minilm_path", "sha256_file", "load_minilm", "load_tokenizer", "tokenize", "mean_pool",
    "sentence_embeddings", "value_relation", "relation_kl", "in_batch_contrastive_loss",
    # linear attention and associative recall (chapter 14)
    "elu_feature_map", "draw_random_features", "positive_random_features", "kernel_attention", "linear_attention",
    "LinearAttentionState", "linear_attention_step", "LinearStateCache", "LinearMultiHeadAttention", "IGNORE_INDEX",
    "associative_recall",
    # measuring and ablating heads
    "attention_mass", "offset_targets", "ablate_heads", "head_circuits", "composition_score", "copying_score",
    # checks of students' attention code that name the bug
    "clinic",
    # profiling
    "time_it", "time_each", "peak_memory", "can_measure_memory",
    # environment
    "setup_notebook", "check_environment", "EnvironmentInfo", "EnvironmentMismatch", "REPOSITORY_URL",
    # CPU threads that follow the load
    "threads", "use_cpu_threads", "adapt_cpu_threads", "ThreadChoice",
    "__version__",
]
