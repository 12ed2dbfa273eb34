"""A Hugging Face sequence classifier fine-tuned with the torchwise Trainer, nothing downloaded.

The model is a small BERT built from a config (transformers' BertForSequenceClassification), the
tokenizer a word-level one built from the training texts (the `tokenizers` library), the data a small
sentiment set made here. The batches are what Hugging Face code makes (a BatchEncoding with
input_ids, attention_mask, labels from DataCollatorWithPadding); the Trainer calls model(**batch) and
trains on the loss the model computes itself. Validation reports val_loss, val_acc and a torchmetrics
F1 streamed batch by batch.

    python examples/hf_text_classifier.py RUN_DIR [--epochs 3] [--resume]
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

POSITIVE = ["good", "great", "fine", "lovely", "excellent", "happy", "nice", "superb"]
NEGATIVE = ["bad", "awful", "poor", "terrible", "sad", "ugly", "boring", "worse"]
FILLER = ["the", "a", "movie", "film", "was", "really", "quite", "plot", "actors", "and", "very", "story", "it"]


def make_texts(n: int, seed: int) -> list[tuple[str, int]]:
    """Sentences of 6-12 words: filler, and sentiment words of the label's side (one of the other side
    in a third of them, so that a single word does not decide)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        label = rng.randrange(2)
        own, other = (POSITIVE, NEGATIVE) if label else (NEGATIVE, POSITIVE)
        words = [rng.choice(FILLER) for _ in range(rng.randint(4, 9))] + [rng.choice(own), rng.choice(own)]
        if rng.random() < 0.33:
            words.append(rng.choice(other))
        rng.shuffle(words)
        out.append((" ".join(words), label))
    return out


def make_tokenizer(texts: list[str]):
    """A word-level fast tokenizer over the training texts' words (special tokens first)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    words = sorted({w for t in texts for w in t.split()})
    vocab = {token: i for i, token in enumerate(specials + words)}
    core = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = Whitespace()
    core.post_processor = TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]")


class Encoded(Dataset):
    """Token ids per text (unpadded: the collator pads each batch to its longest text)."""

    def __init__(self, pairs: list[tuple[str, int]], tokenizer):
        self.items = [dict(tokenizer(text), label=label) for text, label in pairs]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]


def make_model(vocab_size: int, seed: int = 0):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=2)
    return BertForSequenceClassification(config)


def build_trainer(out_dir: str | Path | None, *, epochs: int = 3, resume: bool = False, lr: float = 2e-3,
                  **settings):
    """The Trainer of this example (the tests add their own settings and callbacks)."""
    from transformers import DataCollatorWithPadding

    import torchwise

    train_pairs, val_pairs = make_texts(480, seed=0), make_texts(160, seed=1)
    tokenizer = make_tokenizer([t for t, _ in train_pairs])
    collate = DataCollatorWithPadding(tokenizer)
    model = make_model(len(tokenizer))
    metrics = {}
    try:
        from torchmetrics.classification import MulticlassF1Score

        metrics["f1"] = MulticlassF1Score(num_classes=2, average="macro")
    except ImportError:  # torchmetrics is optional: the run reports loss and accuracy without it
        pass
    return torchwise.Trainer(
        model, lambda params: torch.optim.AdamW(params, lr=lr),
        train_data=DataLoader(Encoded(train_pairs, tokenizer), batch_size=16, shuffle=True, collate_fn=collate),
        val_data=DataLoader(Encoded(val_pairs, tokenizer), batch_size=32, collate_fn=collate),
        metrics=metrics, epochs=epochs, out_dir=out_dir, resume=resume, seed=0, scheduler="cosine",
        **settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    result = build_trainer(args.out_dir, epochs=args.epochs, resume=args.resume).fit()
    last = result.history[-1]
    print(f"val_acc {last['val_acc']:.4f} val_f1 {last.get('val_f1', float('nan')):.4f} "
          f"steps {result.steps} findings {len(result.findings)}")


if __name__ == "__main__":
    main()
