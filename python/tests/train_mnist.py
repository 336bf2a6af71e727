"""PyTorch's MNIST example (pytorch/examples, mnist/main.py, BSD-3-Clause), as a
user runs it: the model, the optimizer, the loops and the transforms are the
example's own. What differs from it:

- the data: an image folder given on the command line (torchvision's
  ImageFolder) instead of the MNIST download; a few steps (--steps);
- the loader: ``--loader ferry`` makes ``DataLoader`` ferry's, the one line a
  user changes;
- it prints one JSON line: the losses, and each batch's labels and the sum of
  its pixels, for the test to compare.
"""
import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torchvision import datasets, transforms


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch, log):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        log["labels"].append(target.tolist())
        log["pixels"].append(float(data.double().sum()))
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        log["losses"].append(loss.item())
        if batch_idx % args.log_interval == 0:
            log["seen"].append('Train Epoch: {} [{}/{} ({:.0f}%)]'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader)))
        if batch_idx + 1 == args.steps:
            break


def test(model, device, test_loader, log):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    log["test"].append((test_loss, correct, len(test_loader.dataset)))


def main():
    parser = argparse.ArgumentParser(description='PyTorch MNIST Example')
    parser.add_argument('data')
    parser.add_argument('--loader', default='torch', choices=['torch', 'ferry'])
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--test-batch-size', type=int, default=32)
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--steps', type=int, default=4)
    parser.add_argument('--lr', type=float, default=1.0)
    parser.add_argument('--gamma', type=float, default=0.7)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--log-interval', type=int, default=2)
    parser.add_argument('--shuffle', type=int, default=1)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cpu")

    train_kwargs = {'batch_size': args.batch_size, 'num_workers': 2,
                    'shuffle': bool(args.shuffle)}
    test_kwargs = {'batch_size': args.test_batch_size}

    transform = transforms.Compose([
        transforms.Grayscale(),
        transforms.ToTensor(),
        transforms.Normalize((0.1307,), (0.3081,))
    ])
    if args.loader == 'torch':
        from torch.utils.data import DataLoader
    else:
        from ferry import DataLoader
    dataset1 = datasets.ImageFolder(args.data, transform=transform)
    dataset2 = datasets.ImageFolder(args.data, transform=transform)
    train_loader = DataLoader(dataset1, **train_kwargs)
    test_loader = DataLoader(dataset2, **test_kwargs)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    log = {"losses": [], "labels": [], "pixels": [], "test": [], "seen": []}
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch, log)
        test(model, device, test_loader, log)
        scheduler.step()
    print(json.dumps(log))


if __name__ == '__main__':
    main()
