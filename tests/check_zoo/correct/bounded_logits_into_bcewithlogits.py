"""A binary classifier trained with BCEWithLogitsLoss whose head bounds its logits with a scaled tanh, so that it
never grows confident (predicted probabilities stay within 0.51..0.73): every logit lies in (0.05, 0.95), inside
(0, 1), yet they are logits, not probabilities. No sigmoid runs before the loss."""
import torch
import torch.nn as nn

torch.manual_seed(3)
features = torch.randn(800, 12)
labels = (features[:, :3].sum(1) > 0).float()


class BoundedHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 24), nn.Tanh())
        self.score = nn.Linear(24, 1)

    def forward(self, x):
        return 0.5 + 0.45 * torch.tanh(self.score(self.body(x))).squeeze(1)


model = BoundedHead()
criterion = nn.BCEWithLogitsLoss()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
for epoch in range(4):
    order = torch.randperm(800)
    for i in range(0, 800, 40):
        idx = order[i:i + 40]
        loss = criterion(model(features[idx]), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("epoch", epoch, "loss", round(loss.item(), 4))
