"""A siamese network in the shape of the classic example: a ResNet-style backbone whose first
convolution is swapped for a one-channel one, cut before its classifier with
`nn.Sequential(*list(resnet.children())[:-1])`, both images' features concatenated into a
small head (init by Module.apply: xavier_uniform_ and `bias.data.fill_`), a sigmoid and
BCELoss, Adadelta with a StepLR schedule. The backbone is written here (a torchvision model
is built on torch's C++ core); the pairs are numpy images, same-class or not, loaded by two
DataLoader worker processes."""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TinyResNet(nn.Module):
    def __init__(self, widths=(8, 16), num_classes=10):
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(widths[0], 1)
        self.layer2 = self._make_layer(widths[1], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[1] * BasicBlock.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        block = BasicBlock(self.inplanes, planes, stride, downsample)
        self.inplanes = planes
        return nn.Sequential(block)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class SiameseNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.resnet = TinyResNet()
        # Grey images: a one-channel first layer, in the place of the three-channel one.
        self.resnet.conv1 = nn.Conv2d(1, 8, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3),
                                      bias=False)
        self.fc_in_features = self.resnet.fc.in_features
        self.resnet = torch.nn.Sequential(*(list(self.resnet.children())[:-1]))
        self.fc = nn.Sequential(
            nn.Linear(self.fc_in_features * 2, 16),
            nn.ReLU(inplace=True),
            nn.Linear(16, 1),
        )
        self.sigmoid = nn.Sigmoid()
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        output = torch.cat((output1, output2), 1)
        return self.sigmoid(self.fc(output))


class PairDataset(torch.utils.data.Dataset):
    """Pairs of noisy 16x16 images of four stripe patterns; the target is 1 for a pair of
    the same pattern."""

    def __init__(self, count, seed):
        rng = np.random.default_rng(seed)
        rows = np.arange(16)
        patterns = np.stack([np.tile(((rows // w) % 2)[:, None], (1, 16)) for w in (1, 2, 4, 8)])
        self.pairs = []
        for index in range(count):
            first = rng.integers(4)
            second = first if index % 2 == 0 else (first + rng.integers(1, 4)) % 4
            images = [patterns[k] + 0.3 * rng.standard_normal((16, 16)) for k in (first, second)]
            self.pairs.append([torch.from_numpy(image[None].astype(np.float32))
                               for image in images] + [float(first == second)])

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        image_1, image_2, target = self.pairs[index]
        return image_1, image_2, torch.tensor(target, dtype=torch.float)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--init", required=True)
    args = parser.parse_args()

    torch.manual_seed(1)
    train_loader = torch.utils.data.DataLoader(PairDataset(12, 0), batch_size=args.batch_size,
                                               num_workers=2)
    test_loader = torch.utils.data.DataLoader(PairDataset(8, 1), batch_size=args.batch_size)
    model = SiameseNetwork()
    print(model)
    if os.path.exists(args.init):
        model.load_state_dict(torch.load(args.init))
    else:
        torch.save(model.state_dict(), args.init)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    criterion = nn.BCELoss()

    for epoch in range(1, args.epochs + 1):
        model.train()
        for batch_idx, (images_1, images_2, targets) in enumerate(train_loader):
            optimizer.zero_grad()
            outputs = model(images_1, images_2).squeeze()
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            print(f"Train Epoch: {epoch} batch {batch_idx} loss {loss.item():.15e}")
        model.eval()
        test_loss = 0
        correct = 0
        with torch.no_grad():
            for images_1, images_2, targets in test_loader:
                outputs = model(images_1, images_2).squeeze()
                test_loss += criterion(outputs, targets).sum().item()
                pred = torch.where(outputs > 0.5, 1, 0)
                correct += pred.eq(targets.view_as(pred)).sum().item()
        test_loss /= len(test_loader.dataset)
        print(f"Test set: Average loss: {test_loss:.15e}, Accuracy: {correct}/"
              f"{len(test_loader.dataset)}")
        scheduler.step()


if __name__ == "__main__":
    main()
