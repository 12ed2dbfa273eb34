# expect: loss-average-wrong-count
"""A linear SVM trained on batches cut by hand from a tensor (no DataLoader): each batch's hinge loss is a mean,
the epoch adds them up and divides by the number of samples, so the printed epoch loss is batch-size times too
small."""
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(600, 2)
Y = torch.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)
model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
N, batch_size = len(Y), 6
for epoch in range(3):
    perm = torch.randperm(N)
    sum_loss = 0.0
    for i in range(0, N, batch_size):
        x, y = X[perm[i:i + batch_size]], Y[perm[i:i + batch_size]]
        optimizer.zero_grad()
        output = model(x).squeeze(1)
        weight = model.weight.squeeze()
        loss = torch.mean(torch.clamp(1 - y * output, min=0)) + 0.01 * (weight @ weight) / 2
        loss.backward()
        optimizer.step()
        sum_loss += float(loss)
    print("epoch {:3d}  loss {}".format(epoch, sum_loss / N))
