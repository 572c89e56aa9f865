"""An LSTM image classifier in the shape of the classic MNIST-RNN example: each image's rows
are a sequence (batch_first), the last hidden state goes through BatchNorm1d, dropout-free
linear layers and log_softmax, trained with Adam, nll_loss and a StepLR schedule; the test
pass sums the loss (reduction='sum') and counts argmax hits; the weights are saved with
torch.save(model.state_dict()). The images are numpy digits-like blobs; the device is chosen
as scripts choose it (cuda, else mps, else cpu)."""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(input_size=12, hidden_size=16, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(16)
        self.fc1 = nn.Linear(16, 12)
        self.fc2 = nn.Linear(12, 4)

    def forward(self, input):
        input = input.reshape(-1, 12, 12)  # (batch, rows as time steps, row pixels)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = F.relu(self.fc1(output))
        output = self.fc2(output)
        return F.log_softmax(output, dim=1)


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)} "
              f"({100. * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.15e}")


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    print(f"\nTest set: Average loss: {test_loss:.15e}, Accuracy: {correct}/"
          f"{len(test_loader.dataset)} ({100. * correct / len(test_loader.dataset):.0f}%)\n")


def blobs(count, seed):
    """Four classes: a bright square in one of the image's quarters, with noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, count)
    images = 0.2 * rng.standard_normal((count, 1, 12, 12))
    for image, label in zip(images, labels):
        row, col = divmod(int(label), 2)
        image[0, 6 * row + 1:6 * row + 5, 6 * col + 1:6 * col + 5] += 1.0
    return torch.tensor(images, dtype=torch.float32), torch.from_numpy(labels)


def main():
    parser = argparse.ArgumentParser(description="PyTorch-shaped MNIST RNN Example")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--test-batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--gamma", type=float, default=0.5)
    parser.add_argument("--no-cuda", action="store_true", default=False)
    parser.add_argument("--init", required=True)
    parser.add_argument("--save-model", action="store_true", default=False)
    args = parser.parse_args()
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    use_mps = torch.backends.mps.is_available()
    if use_cuda:
        device = torch.device("cuda")
    elif use_mps:
        device = torch.device("mps")
    else:
        device = torch.device("cpu")
    kwargs = {"num_workers": 1, "pin_memory": True} if use_cuda else {}

    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*blobs(48, 0)),
                                               batch_size=args.batch_size, shuffle=False,
                                               **kwargs)
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*blobs(32, 1)),
                                              batch_size=args.test_batch_size, shuffle=False,
                                              **kwargs)
    model = Net().to(device)
    if os.path.exists(args.init):
        model.load_state_dict(torch.load(args.init))
    else:
        torch.save(model.state_dict(), args.init)
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()
    if args.save_model:
        torch.save(model.state_dict(), "mnist_rnn.pt")
        print("saved", sorted(torch.load("mnist_rnn.pt")))


if __name__ == "__main__":
    main()
