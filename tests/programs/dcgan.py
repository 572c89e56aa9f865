"""A DCGAN in the shape of the classic example: Generator of ConvTranspose2d/BatchNorm2d/ReLU
and a Tanh, Discriminator of Conv2d/LeakyReLU(inplace)/BatchNorm2d and a Sigmoid, a
weights_init applied with Module.apply that writes through `.data`, BCELoss, one Adam per
network, and the generator's output detached for the discriminator's step. The images are a
fixed numpy sample (as the examples' `--dataset fake`); the latent noise comes from numpy so
that every library draws the same."""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

nz, ngf, ndf, nc = 8, 8, 8, 1


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False),   # 4x4
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),  # 8x8
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),       # 16x16
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),                # 8x8
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),           # 4x4
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),             # 1x1
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batchSize", type=int, default=6)
    parser.add_argument("--niter", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.0002)
    parser.add_argument("--beta1", type=float, default=0.5)
    parser.add_argument("--init", required=True)
    parser.add_argument("--outf", required=True)
    args = parser.parse_args()

    torch.manual_seed(999)
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(7)
    images = torch.from_numpy(rng.uniform(-1, 1, (3 * args.batchSize, nc, 16, 16))
                              .astype(np.float32))
    dataloader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images),
                                             batch_size=args.batchSize, shuffle=False)

    netG = Generator().to(device)
    netG.apply(weights_init)
    netD = Discriminator().to(device)
    netD.apply(weights_init)
    print(netG)
    print(netD)
    if os.path.exists(args.init):
        state = torch.load(args.init, map_location=lambda storage, loc: storage)
        netG.load_state_dict(state["G"])
        netD.load_state_dict(state["D"])
    else:
        torch.save({"G": netG.state_dict(), "D": netD.state_dict()}, args.init)

    criterion = nn.BCELoss()
    fixed_noise = torch.from_numpy(rng.standard_normal((args.batchSize, nz, 1, 1))
                                   .astype(np.float32))
    real_label, fake_label = 1, 0
    optimizerD = optim.Adam(netD.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=args.lr, betas=(args.beta1, 0.999))

    for epoch in range(args.niter):
        for i, data in enumerate(dataloader, 0):
            # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
            netD.zero_grad()
            real_cpu = data[0].to(device)
            batch_size = real_cpu.size(0)
            label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype, device=device)
            output = netD(real_cpu)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()

            noise = torch.from_numpy(rng.standard_normal((batch_size, nz, 1, 1))
                                     .astype(np.float32)).to(device)
            fake = netG(noise)
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()

            # (2) Update G: maximize log(D(G(z)))
            netG.zero_grad()
            label.fill_(real_label)
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()
            print(f"[{epoch}/{args.niter}][{i}/{len(dataloader)}] Loss_D: {errD.item():.15e} "
                  f"Loss_G: {errG.item():.15e} D(x): {D_x:.15e} "
                  f"D(G(z)): {D_G_z1:.15e} / {D_G_z2:.15e}")
        netG.eval()
        with torch.no_grad():
            fake = netG(fixed_noise)
        netG.train()
        print(f"epoch {epoch} fixed sample mean {fake.mean().item():.15e}")
        torch.save(netG.state_dict(), os.path.join(args.outf, f"netG_epoch_{epoch}.pth"))
        torch.save(netD.state_dict(), os.path.join(args.outf, f"netD_epoch_{epoch}.pth"))


if __name__ == "__main__":
    main()
