# info-ok: no-gradient-flow
"""A U-Net-style model that builds a backbone as an attribute but takes its layers from another copy of it (as a
notebook does when `self.layers = list(backbone.children())` names the global instead of `self.backbone`). The
attribute's parameters go to the optimizer and never receive a gradient, but they never run either: the model
computes what it should, and trains. A leftover layer is an info hint, not a warning."""
import torch
import torch.nn as nn

torch.manual_seed(0)


def make_backbone() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.ReLU())


backbone = make_backbone()


class SegNet(nn.Module):
    def __init__(self, n_class: int):
        super().__init__()
        self.backbone = make_backbone()  # never called: the layers below come from the global copy
        self.base_layers = list(backbone.children())
        self.encoder = nn.Sequential(*self.base_layers)
        self.decoder = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(32, n_class, 3, padding=1))

    def forward(self, x):
        return self.decoder(self.encoder(x))


model = SegNet(n_class=3)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 3, 16, 16)
y = (x[:, :1] > 0).long().squeeze(1) + (x[:, 1:2] > 0.5).long().squeeze(1)
for epoch in range(6):
    for i in range(0, 64, 8):
        loss = nn.functional.cross_entropy(model(x[i:i + 8]), y[i:i + 8])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
