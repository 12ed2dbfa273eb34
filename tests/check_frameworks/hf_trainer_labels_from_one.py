"""transformers' Trainer fine-tunes a tiny BERT (built from a config, no download) on a 3-class token task.

Each sequence carries its class as a marker token at position 1. The label file numbers the classes 1..3, so the
model was given num_labels=4 to stop cross entropy from failing: output 0 is a class that never occurs.
"""
import inspect
import shutil
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

set_seed(0)
VOCAB, SEQ, CLS, MARKERS = 40, 12, 4, (1, 2, 3)
NUM_LABELS = 4  # classes 1..3, plus an index 0 that never occurs


class TokenTask(Dataset):
    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.classes = torch.arange(n) % 3
        self.ids = torch.randint(5, VOCAB, (n, SEQ), generator=g)
        self.ids[:, 0] = CLS
        self.ids[:, 1] = torch.tensor(MARKERS)[self.classes]
        self.labels = self.classes + 1  # planted: class ids as stored in the label file, 1..3

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": self.labels[i]}


config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=SEQ, num_labels=NUM_LABELS)
model = BertForSequenceClassification(config)
out_dir = tempfile.mkdtemp(prefix="hf_trainer_")
params = inspect.signature(TrainingArguments.__init__).parameters
extra = {"eval_strategy" if "eval_strategy" in params else "evaluation_strategy": "epoch",
         "use_cpu" if "use_cpu" in params else "no_cuda": True}
args = TrainingArguments(output_dir=out_dir, report_to=[], num_train_epochs=6, per_device_train_batch_size=16,
                         per_device_eval_batch_size=32, learning_rate=1e-2, save_strategy="no",
                         logging_strategy="no", disable_tqdm=True, seed=0, **extra)
trainer = Trainer(model=model, args=args, train_dataset=TokenTask(192, seed=1), eval_dataset=TokenTask(48, seed=2))
trainer.train()  # reported here: the loss is computed inside transformers, under this call
print("eval", trainer.evaluate())
shutil.rmtree(out_dir, ignore_errors=True)
