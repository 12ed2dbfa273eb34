"""2017-style code: Variable wrappers, .data, model.forward(x) and criterion.forward(out, y) called directly, a
summed loss written with the deprecated size_average=False, and a train function that returns loss.item()
(so no loss tensor outlives its step)."""
import torch
import torch.nn as nn
from torch.autograd import Variable

torch.manual_seed(0)
X = torch.randn(1500, 10)
Y = (X[:, 0] + X[:, 1] > 0).long()
teX, teY, X, Y = X[1200:], Y[1200:], X[:1200], Y[:1200]


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


model = Net()
criterion = nn.CrossEntropyLoss(size_average=False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9)


def train(x, y):
    optimizer.zero_grad()
    fx = model.forward(Variable(x, requires_grad=False))
    output = criterion.forward(fx, Variable(y, requires_grad=False))
    output.backward()
    optimizer.step()
    return output.item()


for epoch in range(6):
    cost = 0.0
    for k in range(0, 1200, 40):
        cost += train(X[k:k + 40], Y[k:k + 40])
    with torch.no_grad():
        pred = model.forward(Variable(teX)).data.max(1)[1]
    print("epoch %d cost %.2f test acc %.3f" % (epoch, cost / 1200, (pred == teY).float().mean()))
