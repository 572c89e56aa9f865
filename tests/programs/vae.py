"""A variational autoencoder in the shape of the classic example: encoder to mu and logvar,
the reparameterisation trick, a sigmoid decoder, binary cross-entropy plus the KL term summed
over the batch (reduction='sum'), Adam, a train and a test pass per epoch, and samples decoded
from the prior under no_grad. float64, so the losses are compared to 1e-10. The reparameter-
isation's noise comes from numpy so that every library draws the same. Each epoch saves the
tutorials' checkpoint dict (epoch, model and optimizer state, the last loss tensor), which is
reloaded at the end into a fresh model and optimizer."""
import argparse
import os

import numpy as np
import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F

PIXELS = 64


class VAE(nn.Module):
    def __init__(self, hidden=32, latent=4):
        super().__init__()
        self.fc1 = nn.Linear(PIXELS, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, PIXELS)
        self.noise = np.random.default_rng(11)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.from_numpy(self.noise.standard_normal(tuple(std.shape))).to(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, PIXELS))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, PIXELS), reduction="sum")
    # KL(q(z|x) || N(0, I)), in closed form
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--init", required=True)
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)

    rng = np.random.default_rng(3)
    # Blurry blobs in [0, 1], 8x8: something a small VAE can learn.
    grid = np.linspace(-1, 1, 8)
    centres = rng.uniform(-0.6, 0.6, (40, 2, 1, 1))
    images = np.exp(-((grid[None, :, None] - centres[:, 0]) ** 2
                      + (grid[None, None, :] - centres[:, 1]) ** 2) * 4)
    images = torch.tensor(images[:, None], dtype=torch.float64)
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images[:32], torch.zeros(32)), batch_size=args.batch_size)
    test_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images[32:], torch.zeros(8)), batch_size=args.batch_size)

    model = VAE()
    if os.path.exists(args.init):
        model.load_state_dict(torch.load(args.init))
    else:
        torch.save(model.state_dict(), args.init)
    optimizer = optim.Adam(model.parameters(), lr=1e-2)

    for epoch in range(1, args.epochs + 1):
        model.train()
        train_loss = 0
        for batch_idx, (data, _) in enumerate(train_loader):
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]"
                  f" loss {loss.item() / len(data):.15e}")
        print(f"====> Epoch: {epoch} Average loss: {train_loss / len(train_loader.dataset):.15e}")

        model.eval()
        test_loss = 0
        with torch.no_grad():
            for data, _ in test_loader:
                recon_batch, mu, logvar = model(data)
                test_loss += loss_function(recon_batch, data, mu, logvar).item()
        print(f"====> Test set loss: {test_loss / len(test_loader.dataset):.15e}")
        with torch.no_grad():
            sample = torch.from_numpy(model.noise.standard_normal((4, 4)))
            sample = model.decode(sample)
            print(f"====> Sample mean: {sample.mean().item():.15e}")
        torch.save({"epoch": epoch, "model_state_dict": model.state_dict(),
                    "optimizer_state_dict": optimizer.state_dict(), "loss": loss},
                   "checkpoint.tar")

    # Reload the last checkpoint into a fresh model and optimizer, as the tutorials do.
    checkpoint = torch.load("checkpoint.tar", weights_only=True)
    model = VAE()
    model.load_state_dict(checkpoint["model_state_dict"])
    optimizer = optim.Adam(model.parameters(), lr=1e-2)
    optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
    print("reloaded epoch", checkpoint["epoch"], "loss", checkpoint["loss"])
    print("Adam state of fc1.weight:", sorted(optimizer.state[model.fc1.weight]),
          f"step {int(optimizer.state[model.fc1.weight]['step'])}")
    model.eval()
    with torch.no_grad():
        data = next(iter(test_loader))[0]
        recon_batch, mu, logvar = model(data)
        n = min(data.size(0), 4)
        comparison = torch.cat([data[:n], recon_batch.view(args.batch_size, 1, 8, 8)[:n]])
        print(f"comparison {tuple(comparison.shape)} mean {comparison.mean().item():.15e}")


if __name__ == "__main__":
    main()
