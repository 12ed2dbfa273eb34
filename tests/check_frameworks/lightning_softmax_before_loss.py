"""The same Lightning classifier; its training_step feeds softmax probabilities to cross_entropy."""
import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(0, verbose=False)


def blobs(n: int, generator: torch.Generator) -> TensorDataset:
    centers = torch.tensor([[2.0, 0.0] * 5, [0.0, 2.0] * 5, [-2.0, -2.0] * 5]) / 2
    y = torch.arange(n) % 3
    x = centers[y] + torch.randn(n, 10, generator=generator)
    return TensorDataset(x, y)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 3))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(torch.softmax(logits, dim=1), y)  # planted, reported here
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=False)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


g = torch.Generator().manual_seed(0)
train = DataLoader(blobs(480, g), batch_size=32, shuffle=True)
val = DataLoader(blobs(96, g), batch_size=32)
trainer = L.Trainer(max_epochs=4, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Classifier(), train, val)
print("val_acc", float(trainer.callback_metrics["val_acc"]))
