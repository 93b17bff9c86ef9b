#!/usr/bin/env python3
"""
NAME
    unseen.py - small PyTorch training jobs, each with one planted cause of GPU idleness

SYNOPSIS
    python3 unseen.py MODE [--seconds S]

DESCRIPTION
    A blind test set for a GPU-idleness diagnosis tool.  Every MODE is an
    ordinary-looking training job (a real model, a real loss, a real optimizer
    step) written the way such scripts usually are.  A planted MODE has one
    host-side cause that leaves the GPU idle; its twin MODE_fixed is the same
    job (same model, same batch, same work per step) with only the standard
    fix applied, so that steps/s of the pair give the real speed-up of the fix.
    The healthy modes have no planted cause and no twin.

    The one line that causes a planted bottleneck carries a trailing comment
    made of the word CAUSE and the names of the modes it causes (after a hash
    sign); summarize_unseen.py finds those comments with the tokenize module.

PROTOCOL
    1. import, build the model and the data, warm up for about 1.5 s (CUDA
       context, cuDNN autotuning, caching allocator, DataLoader workers);
    2. print "ready" on stdout and block reading one line from stdin;
    3. train for S wall seconds (default 7), counting completed optimizer steps;
    4. synchronize, print "done N" on stdout and exit 0.
    stdout carries nothing else; progress logs and warnings go to stderr.

MODES
    Planted (each also exists as MODE_fixed):

    metrics_sync       VGG-style CIFAR net, batches already on the GPU; a
                       log_metrics() helper reads loss and accuracy with
                       .item()/float() every step.       truth: host-sync
                       fixed: metrics summed on the GPU, read every 100 steps.
    nan_guard          4-block transformer LM; after backward every step does
                       `if not torch.isfinite(loss): continue`, then ~3 ms of
                       Python bookkeeping.      truth: host-sync, blocking-copy
                       fixed: the same check every 100 steps.
    tokenize_inline    embedding + 2-block transformer text classifier; the
                       main thread WordPiece-tokenizes each batch in pure
                       Python and calls torch.tensor(rows).cuda().
                                            truth: host-bound, input-starved
                       fixed: same tokenization in a DataLoader, 6 persistent
                       workers, pinned memory, prefetch, non_blocking copies.
    numpy_augment      small ResNet, batch 32 of 128x128 crops; a 1-worker
                       DataLoader whose Dataset does numpy augmentation
                       (crop, flip, colour jitter, 7x7 blur, sharpen, tone
                       curve, noise; ~2 ms a sample).     truth: input-starved
                       fixed: 8 persistent workers, prefetch 4, pinned memory.
    pageable_inputs    MLP on 64 MiB batches sliced out of a feature matrix in
                       ordinary (pageable) host memory, moved with .to(cuda).
                                        truth: pageable-copy, blocking-copy
                       fixed: two pinned staging buffers filled in place,
                       copied with non_blocking=True.
    tiny_batch         6-block transformer encoder (d_model 256), batch 2,
                       seq 32, eager: hundreds of tiny kernels per step.
                                             truth: launch-bound, small-kernels
                       fixed: the whole step (forward, backward, Adam with
                       capturable=True) captured once in a CUDA graph and
                       replayed.
    timer_sync         MLP step inside a StepTimer context manager whose
                       __exit__ calls torch.cuda.synchronize(), then ~2 ms of
                       Python progress reporting.            truth: host-sync
                       fixed: CUDA-event timing read every 100 steps.
    cache_flush        4-block transformer LM, random sequence length per step,
                       torch.cuda.empty_cache() at the end of every step.
                                                           truth: alloc-churn
                       fixed: no empty_cache().
    mixed_loader_item  numpy_augment's slow loader with 2 workers AND a
                       per-step loss.item().  The loader is the bigger cost.
                                 truth: input-starved (host-sync may also show)
                       fixed: 8 workers only; the .item() stays.

    Competing-fix twins (issue 32): the planted cause stays and the OTHER fix of a job
    with two diagnoses is made, so that both fixes are measured:

    metrics_sync_graph, nan_guard_graph, timer_sync_graph, tokenize_inline_graph,
    mixed_loader_item_graph, numpy_augment_graph
                       the step (forward, backward, optimizer) captured once as
                       a CUDA graph and replayed; the sync, the bookkeeping and
                       the inline tokenizing stay.         fix of: launch-bound
    cache_flush_graph  cache_flush's lengths padded up to multiples of 64 (the
                       padding's targets ignored), one graph a length replays
                       the whole step; the empty_cache() stays.
                                                          fix of: launch-bound
    mixed_loader_item_nosync
                       mixed_loader_item without the per-step loss.item();
                       the 2-worker loader stays.            fix of: host-sync
    pageable_inputs_pinned
                       pageable_inputs with its feature matrix pinned once at
                       start, blocks copied with non_blocking=True: nothing is
                       staged on the training thread (the _fixed twin fills
                       pinned buffers there, a host copy of 64 MiB a step).
                                                         fix of: pageable-copy

    Probes (no twin, no fix: what a twin's own change costs apart from its fix):

    tiny_batch_capturable
                       tiny_batch eager with Adam(capturable=True), the optimizer
                       its graph twin needs: the GPU time that optimizer adds.

    Healthy (no twin, no planted cause):

    healthy_big        6-block transformer LM (d_model 1024), 16x1024 tokens,
                       bf16 autocast, data on the GPU, loss read every 200
                       steps; ~20 ms of GPU work a step.
                                            truth: gpu-bound, no-bottleneck-found
    healthy_loader     ResNet on 112x112 images from a DataLoader with 6
                       workers, cheap __getitem__, pinned memory, non_blocking
                       copies; GPU-bound.   truth: gpu-bound, no-bottleneck-found

MEASURED
    One H200 host (16 cores), steps/s of MODE -> MODE_fixed, and the GPU
    kernel time per step (profiler) of the planted job:
      metrics_sync 200 -> 257 (in-process run), nan_guard 40 -> 51 (GPU 20 ms),
      tokenize_inline 59 -> 164 (GPU 2.6 ms), numpy_augment 12 -> 89 (GPU 12 ms),
      pageable_inputs 90 -> 382 (GPU 8 ms, of it 7 ms pageable copy),
      tiny_batch 89 -> 720 (GPU 2.3 ms), timer_sync 82 -> 113 (GPU 9 ms),
      cache_flush 52 -> 77 (GPU 13-16 ms), mixed_loader_item 18 -> 66;
      healthy_big 29 ms a step at 100% GPU busy, healthy_loader 18.6 ms at 98%.
    The host-side costs (bookkeeping gauges, tokenizer, augmentation) were
    calibrated there: ~3 ms, ~2 ms, ~17 ms a batch, ~2.6 ms a sample.

OPTIONS
    --seconds S    length of the timed loop in wall seconds (default 7)

EXAMPLE
    (sleep 1; echo go) | python3 unseen.py metrics_sync --seconds 3
"""

import argparse
import collections
import os
import random
import string
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

DEVICE = torch.device("cuda")
WARMUP_SECONDS = 1.5
# Loader datasets report this length so that one epoch outlasts any run: the
# loader iterator (and its workers) made during warm-up serve the timed loop.
VIRTUAL_EPOCH = 1_000_000


# --------------------------------------------------------------------------
# small utilities
# --------------------------------------------------------------------------

def log(message):
    """Progress messages go to stderr: stdout carries only the protocol."""
    print(f"[unseen] {message}", file=sys.stderr, flush=True)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def steps_for(seconds):
    """Yield step numbers until `seconds` of wall time have passed (at least one)."""
    deadline = time.perf_counter() + seconds
    step = 0
    while step == 0 or time.perf_counter() < deadline:
        yield step
        step += 1


class HostBookkeeper:
    """Per-step host-side bookkeeping of the kind training scripts grow over
    time: exponential moving averages of a set of named gauges (all plain
    Python numbers: step time, learning rate, throughput...), a status line
    re-rendered for a dashboard every step, and a log line every
    `print_every` steps.  Its cost grows with the number of gauges."""

    def __init__(self, gauges, print_every=100):
        kinds = ("ema", "rate", "budget", "share")
        self.names = [f"{kinds[i % len(kinds)]}/{i:05d}" for i in range(gauges)]
        self.ema = dict.fromkeys(self.names, 0.0)
        self.print_every = print_every
        self.status = ""

    def record(self, step, **numbers):
        total = float(sum(numbers.values()))
        stats = {}
        for i, name in enumerate(self.names):
            value = total * (1.0 + 1e-4 * i)
            stats[name] = self.ema[name] = 0.95 * self.ema[name] + 0.05 * value
        self.status = " ".join(f"{name}={value:.4g}" for name, value in stats.items())
        if step % self.print_every == 0:
            log(f"step {step}: " + " ".join(f"{k}={v:.4g}" for k, v in numbers.items()))


# --------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------

def conv_bn_relu(c_in, c_out):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class ConvNet(nn.Module):
    """A small VGG-style CIFAR classifier."""

    def __init__(self, num_classes=10, width=64):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, width), conv_bn_relu(width, width), nn.MaxPool2d(2),
            conv_bn_relu(width, 2 * width), conv_bn_relu(2 * width, 2 * width), nn.MaxPool2d(2),
            conv_bn_relu(2 * width, 4 * width), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.classifier = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x))


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions and a shortcut."""

    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        if stride == 1 and c_in == c_out:
            self.shortcut = nn.Identity()
        else:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x), inplace=True)


class SmallResNet(nn.Module):
    """ResNet-18-like classifier: a stride-2 stem, four stages of basic blocks."""

    def __init__(self, num_classes=10, width=64, blocks=(2, 2, 2, 2)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        layers, channels = [], width
        for stage, n_blocks in enumerate(blocks):
            out_channels = width * 2 ** stage
            for i in range(n_blocks):
                stride = 2 if (i == 0 and stage > 0) else 1
                layers.append(BasicBlock(channels, out_channels, stride))
                channels = out_channels
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class TransformerBlock(nn.Module):
    """Pre-norm transformer block: self-attention (SDPA) and a GELU MLP."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, causal=False):
        super().__init__()
        self.n_heads = n_heads
        self.causal = causal
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, t, c = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, t, 3, self.n_heads, c // self.n_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.dropout(self.proj(attn.transpose(1, 2).reshape(b, t, c)))
        return x + self.dropout(self.mlp(self.norm2(x)))


class CausalLM(nn.Module):
    """Decoder-only language model."""

    def __init__(self, vocab, d_model, n_layers, n_heads, d_ff, max_len, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, dropout, causal=True) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm_loss(model, tokens):
    """Next-token cross-entropy of a (batch, seq+1) token tensor."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


class SequenceClassifier(nn.Module):
    """Transformer encoder over sequences of feature vectors (sensor frames)."""

    def __init__(self, in_features, d_model, n_layers, n_heads, d_ff, num_classes, max_len,
                 dropout=0.1):
        super().__init__()
        self.proj = nn.Linear(in_features, d_model)
        self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, x):
        h = self.proj(x) + self.pos[: x.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h).mean(dim=1))


class TextClassifier(nn.Module):
    """Token embedding, a couple of transformer blocks, masked mean pooling."""

    def __init__(self, vocab, d_model, n_layers, n_heads, d_ff, num_classes, max_len, pad_id=0):
        super().__init__()
        self.pad_id = pad_id
        self.embed = nn.Embedding(vocab, d_model, padding_idx=pad_id)
        self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, ids):
        h = self.embed(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            h = block(h)
        h = self.norm(h)
        mask = (ids != self.pad_id).unsqueeze(-1).to(h.dtype)
        pooled = (h * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)
        return self.head(pooled)


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def synthetic_image_batches(n_batches, batch_size, size, num_classes, device):
    """Class-dependent patterns plus noise, already on the GPU (a cached dataset)."""
    templates = torch.randn(num_classes, 3, size, size, device=device)
    batches = []
    for _ in range(n_batches):
        y = torch.randint(0, num_classes, (batch_size,), device=device)
        x = 0.5 * templates[y] + torch.randn(batch_size, 3, size, size, device=device)
        batches.append((x, y))
    return batches


def synthetic_token_stream(n_batches, batch_size, seq_len, vocab, device):
    """Token sequences from a random walk over the vocabulary (learnable structure)."""
    steps = torch.randint(-3, 4, (n_batches, batch_size, seq_len), device=device)
    start = torch.randint(0, vocab, (n_batches, batch_size, 1), device=device)
    return (start + steps.cumsum(dim=-1)) % vocab


# --- text ---------------------------------------------------------------------

CONSONANTS = "bcdfghjklmnprstvz"
VOWELS = "aeiou"
PUNCT_TABLE = str.maketrans({c: " " for c in string.punctuation})


class TextCorpus:
    """Synthetic 4-topic corpus: sentences of made-up words, labelled by topic."""

    def __init__(self, n_sentences=4096, batch_size=64, num_classes=4, seed=0):
        rng = random.Random(seed)
        syllables = set()
        while len(syllables) < 300:
            s = rng.choice(CONSONANTS) + rng.choice(VOWELS)
            if rng.random() < 0.4:
                s += rng.choice(CONSONANTS)
            syllables.add(s)
        self.syllables = sorted(syllables)
        words = set()
        while len(words) < 6000:
            words.add("".join(rng.choice(self.syllables) for _ in range(rng.randint(2, 4))))
        words = sorted(words)
        rng.shuffle(words)
        topics = [words[i * 60:(i + 1) * 60] for i in range(num_classes)]
        general = words[num_classes * 60:]
        weights = [1.0 / (rank + 10) for rank in range(len(general))]
        self.sentences, self.labels = [], []
        for _ in range(n_sentences):
            label = rng.randrange(num_classes)
            n_words = rng.randint(30, 60)
            chosen = rng.choices(general, weights, k=n_words)
            for i in range(n_words):
                if rng.random() < 0.15:
                    chosen[i] = rng.choice(topics[label])
                if rng.random() < 0.08:
                    chosen[i] += rng.choice(",;:")
            self.sentences.append(" ".join(chosen).capitalize() + rng.choice(".!?"))
            self.labels.append(label)
        self.batch_size = batch_size
        self.n_batches = n_sentences // batch_size

    def batch(self, index):
        """The texts and labels of batch `index` (cycling over the corpus)."""
        start = (index % self.n_batches) * self.batch_size
        end = start + self.batch_size
        return self.sentences[start:end], self.labels[start:end]


class WordPieceTokenizer:
    """Greedy longest-match-first WordPiece, in plain Python."""

    PAD, UNK, CLS = "[PAD]", "[UNK]", "[CLS]"

    def __init__(self, syllables):
        pieces = [self.PAD, self.UNK, self.CLS]
        pieces += list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]
        pieces += syllables + ["##" + s for s in syllables]
        self.vocab = {piece: i for i, piece in enumerate(pieces)}
        self.pad_id, self.unk_id, self.cls_id = 0, 1, 2

    def __len__(self):
        return len(self.vocab)

    def _wordpiece(self, word):
        ids, start, prefix = [], 0, ""
        while start < len(word):
            # the longest vocabulary piece that matches at `start`
            end = next((e for e in range(len(word), start, -1) if prefix + word[start:e] in self.vocab), None)  # CAUSE tokenize_inline
            if end is None:
                return [self.unk_id]
            ids.append(self.vocab[prefix + word[start:end]])
            start, prefix = end, "##"
        return ids

    def encode(self, text, max_len):
        ids = [self.cls_id]
        for word in text.lower().translate(PUNCT_TABLE).split():
            ids.extend(self._wordpiece(word))
        ids = ids[:max_len]
        return ids + [self.pad_id] * (max_len - len(ids))


def make_text_batch(tokenizer, texts, labels, max_len):
    """Tokenize, pad and tensorize one batch."""
    rows = [tokenizer.encode(text, max_len) for text in texts]
    return torch.tensor(rows, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


class TokenizedBatches(Dataset):
    """Each item is one ready batch: the corpus batch, tokenized and padded."""

    def __init__(self, corpus, tokenizer, max_len):
        self.corpus, self.tokenizer, self.max_len = corpus, tokenizer, max_len

    def __len__(self):
        return VIRTUAL_EPOCH

    def __getitem__(self, index):
        texts, labels = self.corpus.batch(index)
        return make_text_batch(self.tokenizer, texts, labels, self.max_len)


# --- images -------------------------------------------------------------------

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
SHARPEN = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32)


def synthetic_photos(n_images, size, num_classes, seed):
    """Decoded-JPEG-like uint8 HWC images: smooth random blobs tinted by class."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n_images)
    tints = rng.uniform(0.2, 0.8, (num_classes, 1, 1, 3))
    coarse = rng.uniform(0.0, 1.0, (n_images, size // 16, size // 16, 3))
    images = np.repeat(np.repeat(coarse, 16, axis=1), 16, axis=2)
    images = 0.6 * images + 0.4 * tints[labels]
    return (images * 255).astype(np.uint8), labels


def gaussian_kernel(size, sigma):
    ax = np.arange(size, dtype=np.float32) - size // 2
    k = np.exp(-(ax[:, None] ** 2 + ax[None, :] ** 2) / np.float32(2 * sigma * sigma))
    return (k / k.sum()).astype(np.float32)


def conv2d_same(img, kernel):
    """Convolve every channel of a CHW image with a small kernel (reflect padding)."""
    k = kernel.shape[0]
    p = k // 2
    _, h, w = img.shape
    padded = np.pad(img, ((0, 0), (p, p), (p, p)), mode="reflect")
    out = np.zeros_like(img)
    for dy in range(k):
        for dx in range(k):
            out += kernel[dy, dx] * padded[:, dy:dy + h, dx:dx + w]  # CAUSE numpy_augment mixed_loader_item
    return out


def augment(image, rng, crop):
    """Training augmentation of one HWC uint8 image into a normalized CHW float32 array."""
    h, w, _ = image.shape
    y0 = int(rng.integers(0, h - crop + 1))
    x0 = int(rng.integers(0, w - crop + 1))
    x = image[y0:y0 + crop, x0:x0 + crop].transpose(2, 0, 1).astype(np.float32) / np.float32(255)
    if rng.random() < 0.5:
        x = x[:, :, ::-1]
    x = np.ascontiguousarray(x)
    # colour jitter: brightness per channel, contrast, saturation
    x *= rng.uniform(0.8, 1.2, size=(3, 1, 1)).astype(np.float32)
    mean = x.mean(axis=(1, 2), keepdims=True)
    x = (x - mean) * np.float32(rng.uniform(0.8, 1.2)) + mean
    gray = x.mean(axis=0, keepdims=True)
    x = gray + (x - gray) * np.float32(rng.uniform(0.7, 1.3))
    # optics: defocus blur, then sharpen
    x = conv2d_same(x, gaussian_kernel(7, rng.uniform(0.6, 1.6)))
    x = conv2d_same(x, SHARPEN)
    # sensor: smoothstep tone curve and noise
    x = np.clip(x, 0.0, 1.0)
    x = x * x * (np.float32(3) - np.float32(2) * x)
    x += rng.standard_normal(x.shape, dtype=np.float32) * np.float32(0.02)
    return ((x - IMAGENET_MEAN) / IMAGENET_STD).astype(np.float32)


class AugmentedPhotos(Dataset):
    """In-memory uint8 photos with heavy numpy augmentation per sample."""

    def __init__(self, n_images=512, source_size=144, crop=128, num_classes=10, seed=0):
        self.images, self.labels = synthetic_photos(n_images, source_size, num_classes, seed)
        self.crop = crop

    def __len__(self):
        return VIRTUAL_EPOCH

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        i = index % len(self.images)
        x = augment(self.images[i], rng, self.crop)
        return torch.from_numpy(x), int(self.labels[i])


class CachedPhotos(Dataset):
    """Pre-decoded CHW uint8 photos; __getitem__ only normalizes and flips."""

    MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __init__(self, n_images=2048, size=112, num_classes=10, seed=0):
        images, labels = synthetic_photos(n_images, size, num_classes, seed)
        self.images = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
        self.labels = torch.from_numpy(labels)

    def __len__(self):
        return VIRTUAL_EPOCH

    def __getitem__(self, index):
        i = index % len(self.images)
        x = (self.images[i].float() / 255.0 - self.MEAN) / self.STD
        if index % 2:
            x = x.flip(-1)
        return x, self.labels[i]


# --- tabular --------------------------------------------------------------------

class FeatureShard:
    """A float32 feature matrix in ordinary host memory (as read from a shard
    file), served as contiguous blocks of rows; labels come from a fixed
    random linear teacher and live on the GPU."""

    def __init__(self, n_blocks, rows_per_block, n_features, num_classes, seed=0):
        rng = np.random.default_rng(seed)
        self.rows_per_block = rows_per_block
        self.n_blocks = n_blocks
        self.data = rng.standard_normal((n_blocks * rows_per_block, n_features), dtype=np.float32)
        teacher = rng.standard_normal((n_features, num_classes), dtype=np.float32)
        self.labels = torch.from_numpy((self.data @ teacher).argmax(axis=1)).to(DEVICE)

    def block(self, index):
        """(features as a numpy view, labels on the GPU) of block `index`."""
        b = index % self.n_blocks
        rows = slice(b * self.rows_per_block, (b + 1) * self.rows_per_block)
        return self.data[rows], self.labels[rows]


class PinnedStager:
    """Round-robin pinned host buffers: fill one in place, copy it to the GPU
    asynchronously, and refill it only once that copy has finished."""

    def __init__(self, shape, slots=2, dtype=torch.float32):
        self.buffers = [torch.empty(shape, dtype=dtype, pin_memory=True) for _ in range(slots)]
        self.copied = [None] * slots
        self.slot = 0

    def upload(self, array):
        slot = self.slot
        self.slot = (slot + 1) % len(self.buffers)
        if self.copied[slot] is not None:
            self.copied[slot].synchronize()   # its previous copy is long done in practice
        buffer = self.buffers[slot]
        buffer.copy_(torch.from_numpy(array))
        on_gpu = buffer.to(DEVICE, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        self.copied[slot] = done
        return on_gpu


# --------------------------------------------------------------------------
# jobs: one class per mode; fixed=True builds the MODE_fixed twin
# --------------------------------------------------------------------------

class Job:
    """Builds everything in __init__; train(seconds) runs the training loop for
    that long and returns the number of completed optimizer steps."""

    def __init__(self, fixed):
        self.fixed = fixed
        self.step = 0          # global step, carried from warm-up into the timed loop

    def train(self, seconds):
        raise NotImplementedError

    def close(self):
        pass


def twin_workers(default):
    """A fixed twin's DataLoader workers: $TWIN_WORKERS (unseen.sh sets it to the workers the
    planted job's report simulated its fix with, saving.workers), else `default`."""
    return int(os.environ.get("TWIN_WORKERS") or default)


def forever(loader):
    """An iterator over a loader whose (virtual) epoch outlasts the run."""
    return iter(loader)


class CapturedStep:
    """A competing fix's twin (MODE_graph): one training step, forward, backward and the
    optimizer, captured once as a CUDA graph and replayed, so its launches collapse into
    one replay; whatever the job does around the step (its sync, its host work) stays.

    `step(*inputs)` runs forward, backward and the optimizer step and returns what the job
    reads afterwards (tensors). Gradients are set to None before capture, so the captured
    backward writes them afresh on every replay (PyTorch's whole-network capture recipe);
    optimizers must keep their state on the GPU (Adam/AdamW with capturable=True)."""

    def __init__(self, optimizer, step, *examples):
        self.inputs = [example.clone() for example in examples]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):      # autograd and optimizer state made off the capture
                optimizer.zero_grad(set_to_none=True)
                step(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        optimizer.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = step(*self.inputs)

    def __call__(self, *inputs):
        for static, value in zip(self.inputs, inputs):
            static.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.outputs


# --- metrics_sync ---------------------------------------------------------------

class TrainingHistory:
    """Per-step metrics kept as Python numbers for later plotting."""

    def __init__(self):
        self.records = []

    def log_metrics(self, step, loss, logits, y):
        correct = (logits.argmax(dim=1) == y).sum()
        accuracy = correct.item() / y.numel()  # CAUSE metrics_sync
        self.records.append({"step": step, "loss": loss.item(), "acc": accuracy})
        if step % 100 == 0:
            log(f"step {step} loss {self.records[-1]['loss']:.4f} acc {accuracy:.3f}")


class GpuMetrics:
    """Metrics summed on the GPU, brought to the host every `every` steps."""

    def __init__(self, every=100):
        self.every = every
        self.records = []
        self.loss_sum = torch.zeros((), device=DEVICE)
        self.correct = torch.zeros((), device=DEVICE, dtype=torch.long)
        self.seen = 0

    def log_metrics(self, step, loss, logits, y):
        self.loss_sum += loss.detach()
        self.correct += (logits.argmax(dim=1) == y).sum()
        self.seen += y.numel()
        if (step + 1) % self.every == 0:
            mean_loss = self.loss_sum.item() / self.every
            accuracy = self.correct.item() / self.seen
            self.records.append({"step": step, "loss": mean_loss, "acc": accuracy})
            log(f"step {step} loss {mean_loss:.4f} acc {accuracy:.3f}")
            self.loss_sum.zero_()
            self.correct.zero_()
            self.seen = 0


class MetricsSyncJob(Job):
    # Sized so that GPU time ~ CPU launch time: the per-step sync then
    # serializes the two.  (A much bigger net hides the sync: its kernels
    # outlast their launches and the GPU never starves.)
    BATCH = 256

    def __init__(self, fixed, graph=False):
        super().__init__(fixed)
        self.model = ConvNet(num_classes=10, width=64).to(DEVICE)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9,
                                         weight_decay=5e-4, nesterov=True)
        self.batches = synthetic_image_batches(16, self.BATCH, 32, 10, DEVICE)
        self.history = GpuMetrics(every=100) if fixed else TrainingHistory()
        self.model.train()
        self.captured = CapturedStep(self.optimizer, self.forward_backward, *self.batches[0]) if graph else None

    def forward_backward(self, x, y):
        logits = self.model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        self.optimizer.step()
        return loss, logits

    def train(self, seconds):
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            x, y = self.batches[self.step % len(self.batches)]
            if self.captured:
                loss, logits = self.captured(x, y)
            else:
                self.optimizer.zero_grad(set_to_none=True)
                loss, logits = self.forward_backward(x, y)
            self.history.log_metrics(self.step, loss, logits, y)
            self.step += 1
            completed += 1
        return completed


# --- nan_guard ------------------------------------------------------------------

class NanGuardJob(Job):
    BATCH, SEQ, VOCAB = 96, 256, 4096
    BOOKKEEPING_GAUGES = 6300          # ~3 ms of Python a step on the H200 host

    def __init__(self, fixed, graph=False):
        super().__init__(fixed)
        self.model = CausalLM(self.VOCAB, 512, 4, 8, 2048, max_len=self.SEQ).to(DEVICE)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-4, weight_decay=0.1,
                                           capturable=graph)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / 500))
        self.tokens = synthetic_token_stream(8, self.BATCH, self.SEQ + 1, self.VOCAB, DEVICE)
        self.nan_check_every = 100 if fixed else 1
        self.bookkeeper = HostBookkeeper(self.BOOKKEEPING_GAUGES)
        self.skipped = 0
        self.last_time = time.perf_counter()
        # The graph twin replays the whole step, clipping and update included, then makes
        # the same check on its loss: the per-step sync stays, the launches collapse. (The
        # scheduler's learning rate is fixed at capture: the same work a step.)
        self.model.train()
        self.captured = CapturedStep(self.optimizer, self.whole_step, self.tokens[0]) if graph else None

    def whole_step(self, tokens):
        loss = lm_loss(self.model, tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return loss

    def train(self, seconds):
        if self.captured:
            return self.train_captured(seconds)
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            self.step += 1
            tokens = self.tokens[self.step % len(self.tokens)]
            self.optimizer.zero_grad(set_to_none=True)
            loss = lm_loss(self.model, tokens)
            loss.backward()
            # skip the update when the loss blew up (fp overflow, bad batch)
            if self.step % self.nan_check_every == 0 and not torch.isfinite(loss):  # CAUSE nan_guard
                self.skipped += 1
                log(f"step {self.step}: non-finite loss, update skipped")
                continue
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.after_update()
            completed += 1
        return completed

    def train_captured(self, seconds):
        completed = 0
        for _ in steps_for(seconds):
            self.step += 1
            loss = self.captured(self.tokens[self.step % len(self.tokens)])
            if self.step % self.nan_check_every == 0 and not torch.isfinite(loss):
                self.skipped += 1
            self.after_update()
            completed += 1
        return completed

    def after_update(self):
        """The scheduler's step and the host bookkeeping, after each update."""
        self.scheduler.step()
        now = time.perf_counter()
        self.bookkeeper.record(self.step, step_time=now - self.last_time,
                               lr=self.scheduler.get_last_lr()[0],
                               tokens=self.BATCH * self.SEQ, skipped=self.skipped)
        self.last_time = now


# --- tokenize_inline ------------------------------------------------------------

class TokenizeJob(Job):
    BATCH, MAX_LEN = 64, 128

    def __init__(self, fixed, graph=False):
        super().__init__(fixed)
        self.corpus = TextCorpus(n_sentences=4096, batch_size=self.BATCH)
        self.tokenizer = WordPieceTokenizer(self.corpus.syllables)
        self.model = TextClassifier(len(self.tokenizer), 256, 2, 4, 1024, num_classes=4,
                                    max_len=self.MAX_LEN).to(DEVICE)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=5e-4, capturable=graph)
        self.captured = None
        if graph:       # the tokenizing stays on the training thread; the step is replayed
            self.model.train()
            self.captured = CapturedStep(self.optimizer, self.forward_backward, *self.next_batch())
        self.loader = None
        if fixed:
            dataset = TokenizedBatches(self.corpus, self.tokenizer, self.MAX_LEN)
            self.loader = DataLoader(dataset, batch_size=None, num_workers=twin_workers(6),
                                     persistent_workers=True, pin_memory=True, prefetch_factor=4)
            self.batches = forever(self.loader)

    def next_batch(self):
        if self.fixed:
            ids, labels = next(self.batches)
            return ids.to(DEVICE, non_blocking=True), labels.to(DEVICE, non_blocking=True)
        texts, labels = self.corpus.batch(self.step)
        ids, labels = make_text_batch(self.tokenizer, texts, labels, self.MAX_LEN)
        return ids.cuda(), labels.cuda()

    def forward_backward(self, ids, labels):
        loss = F.cross_entropy(self.model(ids), labels)
        loss.backward()
        self.optimizer.step()
        return loss

    def train(self, seconds):
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            ids, labels = self.next_batch()
            if self.captured:
                loss = self.captured(ids, labels)
            else:
                self.optimizer.zero_grad(set_to_none=True)
                loss = self.forward_backward(ids, labels)
            if self.step % 200 == 0:
                log(f"step {self.step} loss {loss.item():.4f}")
            self.step += 1
            completed += 1
        return completed

    def close(self):
        self.batches = None
        self.loader = None


# --- numpy_augment / mixed_loader_item -----------------------------------------

class AugmentedLoaderJob(Job):
    BATCH = 32

    def __init__(self, fixed, workers, loss_item_every_step, graph=False):
        super().__init__(fixed)
        self.model = SmallResNet(num_classes=10, width=96).to(DEVICE)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9,
                                         weight_decay=1e-4)
        self.loss_item_every_step = loss_item_every_step
        self.losses = []
        self.captured = None
        if graph:
            self.model.train()
            example = (torch.randn(self.BATCH, 3, 128, 128, device=DEVICE),
                       torch.randint(0, 10, (self.BATCH,), device=DEVICE))
            self.captured = CapturedStep(self.optimizer, self.forward_backward, *example)
        dataset = AugmentedPhotos(n_images=512, source_size=144, crop=128)
        if fixed:
            self.loader = DataLoader(dataset, batch_size=self.BATCH, shuffle=True, drop_last=True,
                                     num_workers=twin_workers(8), persistent_workers=True,
                                     prefetch_factor=4, pin_memory=True)
        else:
            self.loader = DataLoader(dataset, batch_size=self.BATCH, shuffle=True, drop_last=True,
                                     num_workers=workers)
        self.batches = forever(self.loader)

    def train(self, seconds):
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            images, labels = next(self.batches)
            images = images.to(DEVICE, non_blocking=True)
            labels = labels.to(DEVICE, non_blocking=True)
            if self.captured:
                loss = self.captured(images, labels)
            else:
                self.optimizer.zero_grad(set_to_none=True)
                loss = self.forward_backward(images, labels)
            if self.loss_item_every_step:
                self.losses.append(loss.item())
            if self.step % 100 == 0:
                log(f"step {self.step} loss {loss.item():.4f}")
            self.step += 1
            completed += 1
        return completed

    def forward_backward(self, images, labels):
        loss = F.cross_entropy(self.model(images), labels)
        loss.backward()
        self.optimizer.step()
        return loss

    def close(self):
        self.batches = None
        self.loader = None


# --- pageable_inputs -------------------------------------------------------------

class PageableInputsJob(Job):
    ROWS, FEATURES, CLASSES = 4096, 4096, 10      # one batch = 64 MiB of float32

    def __init__(self, fixed, pinned_source=False):
        super().__init__(fixed)
        self.shard = FeatureShard(n_blocks=4, rows_per_block=self.ROWS,
                                  n_features=self.FEATURES, num_classes=self.CLASSES)
        # The whole matrix (256 MiB) pinned once: each block is then a pinned view.
        self.pinned = torch.from_numpy(self.shard.data).pin_memory() if pinned_source else None
        self.model = nn.Sequential(
            nn.Linear(self.FEATURES, 1024), nn.GELU(),
            nn.Linear(1024, 1024), nn.GELU(),
            nn.Linear(1024, self.CLASSES),
        ).to(DEVICE)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.stager = PinnedStager((self.ROWS, self.FEATURES)) if fixed else None

    def to_device(self, features):
        if self.pinned is not None:
            start = (self.step % self.shard.n_blocks) * self.ROWS
            return self.pinned[start:start + self.ROWS].to(DEVICE, non_blocking=True)
        if self.fixed:
            return self.stager.upload(features)
        return torch.from_numpy(features).to(DEVICE)  # CAUSE pageable_inputs

    def train(self, seconds):
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            features, labels = self.shard.block(self.step)
            x = self.to_device(features)
            loss = F.cross_entropy(self.model(x), labels)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            if self.step % 100 == 0:
                log(f"step {self.step} loss {loss.item():.4f}")
            self.step += 1
            completed += 1
        return completed


# --- tiny_batch -------------------------------------------------------------------

def classifier_step(model, optimizer, x, y):
    """One eager training step; returns the loss tensor."""
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()  # CAUSE tiny_batch
    optimizer.step()
    return loss


class TinyBatchJob(Job):
    BATCH, SEQ, FEATURES, CLASSES = 2, 32, 64, 8

    def __init__(self, fixed, capturable=False):
        super().__init__(fixed)
        self.model = SequenceClassifier(self.FEATURES, 256, 6, 4, 1024, self.CLASSES,
                                        max_len=self.SEQ).to(DEVICE)
        # capturable=True keeps Adam's step counters on the GPU so that the
        # update can live inside a CUDA graph; the arithmetic is the same.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=3e-4, capturable=fixed or capturable)
        n = 64
        self.inputs = torch.randn(n, self.BATCH, self.SEQ, self.FEATURES, device=DEVICE)
        self.targets = torch.randint(0, self.CLASSES, (n, self.BATCH), device=DEVICE)
        self.last_loss = None
        if fixed:
            self._capture()

    def _capture(self):
        """Capture one whole training step (forward, backward, optimizer) in a graph."""
        self.model.train()
        self.static_x = self.inputs[0].clone()
        self.static_y = self.targets[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):      # warm up autograd and the optimizer state off the capture
                classifier_step(self.model, self.optimizer, self.static_x, self.static_y)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss = F.cross_entropy(self.model(self.static_x), self.static_y)
            self.static_loss.backward()
            self.optimizer.step()

    def train(self, seconds):
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            i = self.step % len(self.inputs)
            if self.fixed:
                self.static_x.copy_(self.inputs[i])
                self.static_y.copy_(self.targets[i])
                self.graph.replay()
                loss = self.static_loss
            else:
                loss = classifier_step(self.model, self.optimizer, self.inputs[i], self.targets[i])
            if self.step % 200 == 0:
                log(f"step {self.step} loss {loss.item():.4f}")
            self.step += 1
            completed += 1
        return completed


# --- timer_sync -------------------------------------------------------------------

class StepTimer:
    """`with timer:` around a step; records the wall time of each step."""

    def __init__(self):
        self.history = collections.deque(maxlen=1000)
        self.last = 0.0

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize()  # CAUSE timer_sync
        self.last = time.perf_counter() - self.start
        self.history.append(self.last)
        return False


class CudaEventTimer:
    """`with timer:` around a step; times it with CUDA events, read every `every` steps."""

    def __init__(self, every=100):
        self.every = every
        self.history = collections.deque(maxlen=1000)
        self.pending = []
        self.last = 0.0

    def __enter__(self):
        self.start = torch.cuda.Event(enable_timing=True)
        self.start.record()
        return self

    def __exit__(self, *exc):
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.pending.append((self.start, end))
        if len(self.pending) >= self.every:
            self.pending[-1][1].synchronize()
            for start, stop in self.pending:
                self.history.append(start.elapsed_time(stop) / 1000.0)
            self.last = self.history[-1]
            self.pending.clear()
        return False


class TimerSyncJob(Job):
    BATCH, FEATURES, HIDDEN, CLASSES = 8192, 1024, 4096, 10
    REPORT_GAUGES = 4300         # ~2 ms of Python a step on the H200 host

    def __init__(self, fixed, graph=False):
        super().__init__(fixed)
        self.model = nn.Sequential(
            nn.Linear(self.FEATURES, self.HIDDEN), nn.LayerNorm(self.HIDDEN), nn.GELU(),
            nn.Linear(self.HIDDEN, self.HIDDEN), nn.LayerNorm(self.HIDDEN), nn.GELU(),
            nn.Linear(self.HIDDEN, self.HIDDEN), nn.LayerNorm(self.HIDDEN), nn.GELU(),
            nn.Linear(self.HIDDEN, self.CLASSES),
        ).to(DEVICE)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, capturable=graph)
        teacher = torch.randn(self.FEATURES, self.CLASSES, device=DEVICE)
        self.inputs = [torch.randn(self.BATCH, self.FEATURES, device=DEVICE) for _ in range(8)]
        self.targets = [(x @ teacher).argmax(dim=1) for x in self.inputs]
        self.timer = CudaEventTimer(every=100) if fixed else StepTimer()
        self.reporter = HostBookkeeper(self.REPORT_GAUGES)
        self.model.train()
        self.captured = CapturedStep(self.optimizer, self.forward_backward, self.inputs[0], self.targets[0]) if graph else None

    def forward_backward(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss

    def train_step(self, x, y):
        if self.captured:
            return self.captured(x, y)
        self.optimizer.zero_grad(set_to_none=True)
        return self.forward_backward(x, y)

    def train(self, seconds):
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            i = self.step % len(self.inputs)
            with self.timer:
                self.train_step(self.inputs[i], self.targets[i])
            self.reporter.record(self.step, step_time=self.timer.last,
                                 samples_per_s=self.BATCH / max(self.timer.last, 1e-6))
            self.step += 1
            completed += 1
        return completed


# --- cache_flush -----------------------------------------------------------------

def release_cached_memory():
    """Hand cached GPU memory back between variable-length batches."""
    torch.cuda.empty_cache()  # CAUSE cache_flush


class BucketedGraphs:
    """cache_flush's launch fix (MODE_graph): a length varies every step, so no one graph
    fits; each batch is padded up to the next multiple of BUCKET tokens (the padding's
    targets ignored: a causal model's real positions never see it, so the loss is the
    same) and one CUDA graph a bucket replays the whole step. Each graph keeps its own
    memory pool, since buckets replay in any order."""

    BUCKET = 64

    def __init__(self, model, optimizer, batch, max_seq):
        self.model, self.optimizer, self.graphs = model, optimizer, {}
        for length in range(max_seq, 0, -self.BUCKET):    # largest first
            inputs = torch.zeros(batch, length, dtype=torch.long, device=DEVICE)
            # every target real while the step is warmed up and captured (all ignored
            # would make the loss 0/0); each replay sets them
            targets = torch.zeros(batch, length, dtype=torch.long, device=DEVICE)
            captured = CapturedStep(optimizer, self._step, inputs, targets)
            self.graphs[length] = captured

    def _step(self, inputs, targets):
        logits = self.model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
        loss.backward()
        self.optimizer.step()
        return loss

    def __call__(self, tokens):
        seq = tokens.shape[1] - 1
        length = -(-seq // self.BUCKET) * self.BUCKET
        captured = self.graphs[length]
        inputs, targets = captured.inputs
        inputs[:, :seq].copy_(tokens[:, :-1])
        inputs[:, seq:].zero_()
        targets[:, :seq].copy_(tokens[:, 1:])
        targets[:, seq:].fill_(-100)
        captured.graph.replay()
        return captured.outputs


class CacheFlushJob(Job):
    BATCH, MAX_SEQ, VOCAB = 48, 512, 4096

    def __init__(self, fixed, graph=False):
        super().__init__(fixed)
        self.model = CausalLM(self.VOCAB, 512, 4, 8, 2048, max_len=self.MAX_SEQ).to(DEVICE)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-4, capturable=graph)
        self.tokens = synthetic_token_stream(8, self.BATCH, self.MAX_SEQ + 1, self.VOCAB, DEVICE)
        self.lengths = random.Random(1234)    # same length sequence in both twins
        self.free_memory_every_step = not fixed
        self.graphs = None
        if graph:       # the empty_cache() stays; the step is replayed
            self.model.train()
            self.graphs = BucketedGraphs(self.model, self.optimizer, self.BATCH, self.MAX_SEQ)

    def train(self, seconds):
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            seq = self.lengths.randint(64, self.MAX_SEQ)
            tokens = self.tokens[self.step % len(self.tokens), :, : seq + 1]
            if self.graphs:
                loss = self.graphs(tokens)
            else:
                loss = lm_loss(self.model, tokens)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
            if self.step % 100 == 0:
                log(f"step {self.step} seq {seq} loss {loss.item():.4f}")
            del loss
            if self.free_memory_every_step:
                release_cached_memory()
            self.step += 1
            completed += 1
        return completed


# --- healthy_big -----------------------------------------------------------------

class HealthyBigJob(Job):
    BATCH, SEQ, VOCAB = 16, 1024, 8192

    def __init__(self, fixed):
        super().__init__(fixed)
        self.model = CausalLM(self.VOCAB, 1024, 6, 16, 4096, max_len=self.SEQ).to(DEVICE)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=2e-4, weight_decay=0.1)
        self.tokens = synthetic_token_stream(4, self.BATCH, self.SEQ + 1, self.VOCAB, DEVICE)

    def train(self, seconds):
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            tokens = self.tokens[self.step % len(self.tokens)]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = lm_loss(self.model, tokens)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            if self.step % 200 == 0:
                log(f"step {self.step} loss {loss.item():.4f}")
            self.step += 1
            completed += 1
        return completed


# --- healthy_loader ---------------------------------------------------------------

class HealthyLoaderJob(Job):
    BATCH = 128

    def __init__(self, fixed):
        super().__init__(fixed)
        self.model = SmallResNet(num_classes=10, width=64).to(DEVICE)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9,
                                         weight_decay=1e-4)
        self.loader = DataLoader(CachedPhotos(n_images=2048, size=112), batch_size=self.BATCH,
                                 shuffle=True, drop_last=True, num_workers=6, pin_memory=True,
                                 persistent_workers=True, prefetch_factor=4)
        self.batches = forever(self.loader)

    def train(self, seconds):
        self.model.train()
        completed = 0
        for _ in steps_for(seconds):
            images, labels = next(self.batches)
            images = images.to(DEVICE, non_blocking=True)
            labels = labels.to(DEVICE, non_blocking=True)
            loss = F.cross_entropy(self.model(images), labels)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            if self.step % 200 == 0:
                log(f"step {self.step} loss {loss.item():.4f}")
            self.step += 1
            completed += 1
        return completed

    def close(self):
        self.batches = None
        self.loader = None


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------

JOBS = {
    "metrics_sync": MetricsSyncJob,
    "nan_guard": NanGuardJob,
    "tokenize_inline": TokenizeJob,
    "numpy_augment": lambda fixed: AugmentedLoaderJob(fixed, workers=1, loss_item_every_step=False),
    "pageable_inputs": PageableInputsJob,
    "tiny_batch": TinyBatchJob,
    "timer_sync": TimerSyncJob,
    "cache_flush": CacheFlushJob,
    "mixed_loader_item": lambda fixed: AugmentedLoaderJob(fixed, workers=2, loss_item_every_step=True),
    "healthy_big": HealthyBigJob,
    "healthy_loader": HealthyLoaderJob,
}
HEALTHY = ("healthy_big", "healthy_loader")
PLANTED = tuple(mode for mode in JOBS if mode not in HEALTHY)
# Twins for the competing fix (issue 32): the planted cause stays and the OTHER fix is made,
# so that both fixes of a job with two diagnoses are measured. MODE_graph captures the step
# in a CUDA graph (the launch fix, for the sync and host-work jobs); MODE_nosync drops the
# per-step sync (the sync fix, for a loader-bound job that also syncs).
COMPETING = {
    "metrics_sync_graph": lambda: MetricsSyncJob(False, graph=True),
    "nan_guard_graph": lambda: NanGuardJob(False, graph=True),
    "tokenize_inline_graph": lambda: TokenizeJob(False, graph=True),
    "timer_sync_graph": lambda: TimerSyncJob(False, graph=True),
    "mixed_loader_item_nosync": lambda: AugmentedLoaderJob(False, workers=2, loss_item_every_step=False),
    "mixed_loader_item_graph": lambda: AugmentedLoaderJob(False, workers=2, loss_item_every_step=True, graph=True),
    "pageable_inputs_pinned": lambda: PageableInputsJob(False, pinned_source=True),
    "numpy_augment_graph": lambda: AugmentedLoaderJob(False, workers=1, loss_item_every_step=False, graph=True),
    "cache_flush_graph": lambda: CacheFlushJob(False, graph=True),
}
# Probes, no twins: what a twin's own change costs apart from its fix.
PROBES = {
    # tiny_batch eager with the capturable Adam its graph twin needs: the GPU time that
    # optimizer adds, apart from the graph.
    "tiny_batch_capturable": lambda: TinyBatchJob(False, capturable=True),
}
ALL_MODES = [m for p in PLANTED for m in (p, p + "_fixed")] + list(HEALTHY) + list(COMPETING) + list(PROBES)


def parse_mode(mode):
    """'X' -> ('X', False), 'X_fixed' -> ('X', True); healthy modes have no twin."""
    base, fixed = mode, False
    if mode.endswith("_fixed"):
        base, fixed = mode[: -len("_fixed")], True
    if base not in JOBS or (fixed and base in HEALTHY):
        raise SystemExit(f"unknown mode {mode!r}; modes: {' '.join(ALL_MODES)}")
    return base, fixed


def make_job(mode):
    """The job of MODE: a planted job, its fixed twin, a healthy job or a competing twin."""
    if mode in COMPETING:
        return COMPETING[mode]()
    if mode in PROBES:
        return PROBES[mode]()
    base, fixed = parse_mode(mode)
    return JOBS[base](fixed)


def main():
    parser = argparse.ArgumentParser(description="training jobs with planted GPU-idleness causes")
    parser.add_argument("mode", help=" | ".join(ALL_MODES))
    parser.add_argument("--seconds", type=float, default=7.0, help="timed loop length (s)")
    args = parser.parse_args()

    set_seed(0)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    job = make_job(args.mode)
    t0 = time.perf_counter()
    warm = job.train(WARMUP_SECONDS)
    torch.cuda.synchronize()
    log(f"{args.mode}: warm-up {warm} steps in {time.perf_counter() - t0:.2f} s")

    print("ready", flush=True)
    sys.stdin.readline()

    t0 = time.perf_counter()
    steps = job.train(args.seconds)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    log(f"{args.mode}: {steps} steps in {elapsed:.2f} s ({steps / elapsed:.1f} steps/s)")
    print(f"done {steps}", flush=True)
    job.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
