"""Optimizers and learning-rate schedulers, as in torch.optim."""

from . import lr_scheduler
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adadelta", "Adagrad", "RMSprop",
           "lr_scheduler"]
