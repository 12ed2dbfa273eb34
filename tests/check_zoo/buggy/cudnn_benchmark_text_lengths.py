# expect: cudnn-benchmark-varying-shapes
"""1-D CNN over reviews of different lengths, each batch padded to its longest review; cudnn.benchmark on."""
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, N = 500, 1200
lengths = (torch.randn(N) * 0.5 + 3).exp().long().clamp(4, 150)   # 4..150 tokens, most around 20
labels = torch.randint(0, 2, (N,))
texts = []
for n, label in zip(lengths.tolist(), labels.tolist()):
    tokens = torch.randint(10, VOCAB, (n,))
    if label:  # positive reviews contain praise words (ids 1..9)
        tokens[torch.randint(0, n, (2,))] = torch.randint(1, 10, (2,))
    texts.append(tokens)


def collate(batch):
    x = pad_sequence([t for t, _ in batch], batch_first=True, padding_value=0)
    return x, torch.tensor([y for _, y in batch])


reviews = list(zip(texts, labels.tolist()))
train_loader = DataLoader(reviews[:1000], batch_size=32, shuffle=True, collate_fn=collate)
val_loader = DataLoader(reviews[1000:], batch_size=100, collate_fn=collate)


class TextCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32, padding_idx=0)
        self.conv = nn.Conv1d(32, 64, kernel_size=3, padding=1)
        self.fc = nn.Linear(64, 2)

    def forward(self, x):
        h = torch.relu(self.conv(self.emb(x).transpose(1, 2)))
        return self.fc(h.max(dim=2).values)


model = TextCNN().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(3):
    model.train()
    for xb, yb in train_loader:
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in val_loader:
            correct += (model(xb.to(device)).argmax(1) == yb.to(device)).sum().item()
    print(epoch, round(loss.item(), 3), correct / 200)
