"""Full-batch L-BFGS with a closure: step(closure) calls the closure (zero_grad, forward, backward) several times
per step, as its line search needs."""
import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.linspace(-3, 3, 400).unsqueeze(1)
y = torch.sin(x) + 0.05 * torch.randn_like(x)
model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=20)
loss_fn = nn.MSELoss()
for step in range(25):
    def closure():
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss
    loss = optimizer.step(closure)
    if step % 5 == 0:
        print(f"step {step} loss {loss.item():.4f}")
