"""Model factory: built-in small models, torchvision and timm architectures, or the user's own callable.

    build_model("smallcnn", num_classes=10, in_channels=1)
    build_model("resnet18", num_classes=5, weights="resnet18-imagenet.pth", freeze_backbone=True)
    build_model("timm:convnext_atto", num_classes=5, weights="convnext_atto.safetensors")
    build_model("mypkg.nets:make_net", num_classes=3)
    model, meta = model_from_run("runs/exp1")
    torch.optim.AdamW(param_groups(model, lr=1e-3, backbone_lr_scale=0.1))

torchvision and timm models are always built without their pretrained weights: nothing is ever
downloaded. Pretrained weights come only from a LOCAL file given with `weights=`, the state dict of
the pretrained model with its original head (an ImageNet file has 1000 classes): the backbone is
loaded from it, and its head, shaped for other classes, is skipped and said (pretrained.py).

    builtin.py         SmallCNN, MLP
    names.py           which family a name is (built in, torchvision, timm:NAME, pkg.module:callable), did-you-mean
    heads.py           the classification head: found (one rule for all), replaced for the task's classes
    pretrained.py      loading a local weights file around the head
    input_channels.py  a 3-channel stem given another number of input channels
    finetune.py        head / backbone parameters, freezing, optimizer param groups
    factory.py         build_model, model_from_run
"""
from __future__ import annotations

from torchwise.models.builtin import BUILTIN, MLP, SmallCNN
from torchwise.models.factory import build_model, model_from_run, read_meta
from torchwise.models.finetune import backbone_parameters, freeze_backbone, head_parameters, param_groups
from torchwise.models.heads import classification_head, head_modules, replace_head
from torchwise.models.input_channels import adapt_first_conv
from torchwise.models.names import (TIMM_PREFIX, check_model_name, model_family, timm_architecture, timm_input,
                                   torchvision_names)
from torchwise.models.pretrained import PretrainedLoad, load_pretrained

__all__ = ["BUILTIN", "MLP", "SmallCNN", "build_model", "model_from_run", "read_meta", "backbone_parameters",
           "freeze_backbone", "head_parameters", "param_groups", "classification_head", "head_modules",
           "replace_head", "adapt_first_conv", "TIMM_PREFIX", "check_model_name", "model_family",
           "timm_architecture", "timm_input", "torchvision_names", "PretrainedLoad", "load_pretrained"]
