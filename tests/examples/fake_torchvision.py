"""A stand-in for the two torchvision names pytorch/examples' MNIST script imports: `datasets.
MNIST` of random images with MNIST's shape and types (no download), and the transforms it
applies, in numpy, so either library's DataLoader collates the samples into its own tensors.
`FAKE_MNIST_SIZES=train,test` sets how many samples (default 256,128)."""
import os
import types

import numpy as np


class MNIST:
    def __init__(self, root, train=True, download=False, transform=None):
        sizes = [int(n) for n in os.environ.get("FAKE_MNIST_SIZES", "256,128").split(",")]
        count = sizes[0] if train else sizes[1]
        rng = np.random.default_rng(0 if train else 1)
        self.targets = rng.integers(0, 10, count)
        # Digits leave a trace a network can learn: a bright band whose row is the label.
        self.data = rng.integers(0, 64, (count, 28, 28)).astype(np.uint8)
        for image, label in zip(self.data, self.targets):
            image[2 + 2 * label:4 + 2 * label, 4:24] = 255
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        image = self.data[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.targets[index])


class Compose:
    def __init__(self, steps):
        self.steps = steps

    def __call__(self, image):
        for step in self.steps:
            image = step(image)
        return image


class ToTensor:
    def __call__(self, image):
        return (image.astype(np.float32) / 255)[None]


class Normalize:
    def __init__(self, mean, std):
        self.mean = np.asarray(mean, np.float32)[:, None, None]
        self.std = np.asarray(std, np.float32)[:, None, None]

    def __call__(self, image):
        return (image - self.mean) / self.std


datasets = types.SimpleNamespace(MNIST=MNIST)
transforms = types.SimpleNamespace(Compose=Compose, ToTensor=ToTensor, Normalize=Normalize)
