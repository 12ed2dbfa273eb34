# expect: log-softmax-into-cross-entropy
"""A model written for NLLLoss (log_softmax at the end of forward) trained with CrossEntropyLoss:
cross_entropy applies log_softmax a second time. log_softmax is idempotent, so the loss is unchanged;
the hint is that the two halves disagree on what the model returns."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
centers = torch.randn(4, 16) * 2
y_all = torch.randint(0, 4, (1024,))
x_all = centers[y_all] + torch.randn(1024, 16)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
for epoch in range(2):
    perm = torch.randperm(len(x_all))
    for i in range(0, len(x_all), 64):
        b = perm[i:i + 64]
        loss = criterion(model(x_all[b]), y_all[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
