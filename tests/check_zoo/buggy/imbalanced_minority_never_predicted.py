# expect: label-imbalance
"""2% positives with a weak signal, plain cross entropy and no class weights: the model settles on
predicting the majority class for every sample and never flags a positive."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
n = 4000
y = (torch.rand(n) < 0.02).long()
X = torch.randn(n, 8) + y.unsqueeze(1) * 0.3
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    perm = torch.randperm(n)
    for i in range(0, n, 100):
        b = perm[i:i + 100]
        loss = F.cross_entropy(model(X[b]), y[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 4))
