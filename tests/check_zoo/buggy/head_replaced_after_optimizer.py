# expect: params-not-in-optimizer
"""The classifier head is swapped for the new task after the optimizer was built."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.classifier = nn.Linear(64, 10)

    def forward(self, x):
        return self.classifier(self.features(x))


model = Backbone()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
model.classifier = nn.Linear(64, 3)          # new task: 3 classes

X = torch.randn(900, 20)
y = torch.randint(0, 3, (900,))
y = (X[:, 0] > 0.4).long() + (X[:, 1] > 0.4).long()
for epoch in range(4):
    for i in range(0, 900, 30):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(X[i:i + 30]), y[i:i + 30])
        loss.backward()
        optimizer.step()
    print(epoch, loss.item())
