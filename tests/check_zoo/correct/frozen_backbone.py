"""Fine-tune only the head of a 'pretrained' backbone: backbone frozen with requires_grad_(False)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
for p in backbone.parameters():
    p.requires_grad_(False)
head = nn.Linear(64, 5)
model = nn.Sequential(backbone, head)

X = torch.randn(1000, 30)
y = (X @ torch.randn(30, 5)).argmax(1)
optimizer = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(5):
    perm = torch.randperm(1000)
    for i in range(0, 1000, 50):
        b = perm[i:i + 50]
        optimizer.zero_grad()
        loss = loss_fn(model(X[b]), y[b])
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
