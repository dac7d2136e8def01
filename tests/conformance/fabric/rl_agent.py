"""A reinforcement-learning loop with a LightningModule agent run under Fabric, the kind of program Lightning's
Fabric PPO example is: the agent (actor and critic) is a ``LightningModule`` whose ``training_step`` computes the
clipped policy loss, the value loss and the entropy bonus and logs them with ``self.log``/``self.log_dict`` to the
Fabric's logger; the loop outside collects rollouts from vectorised environments with the wrapped agent, then runs a
few update epochs over shuffled minibatches with ``fabric.backward`` and the wrapped optimizer.

The environment is written here: a corridor of 7 cells, the agent starts in the middle, moving onto the right end
pays 1, onto the left end 0, each move costs 0.01. Each process seeds its own environments (seed + rank), as the
example does. Checked: the greedy agent walks right to the goal, ``self.fabric``/``self.logger`` are the Fabric's,
the logger's CSV file has the logged metrics, and every process ends with the same weights.
"""

import csv
from pathlib import Path

import torch
from _common import LIGHTNING, expect, fabric_kwargs, ok, parse_args, report
from torch import nn
from torch.distributions import Categorical

if LIGHTNING:
    import lightning as L
    from lightning.fabric import Fabric
    from lightning.fabric.loggers import CSVLogger
else:
    import accelkit as L
    from accelkit import Fabric
    from accelkit.fabric.loggers import CSVLogger

CELLS, ENVS, STEPS, ITERATIONS, UPDATE_EPOCHS, MINIBATCH, GAMMA, CLIP = 7, 8, 16, 6, 3, 32, 0.95, 0.2


class Corridor:
    """``ENVS`` corridors stepped together; an episode that ends starts again in the middle."""

    def __init__(self, envs: int):
        self.position = torch.full((envs,), CELLS // 2)

    def observe(self) -> torch.Tensor:
        return nn.functional.one_hot(self.position, CELLS).float()

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.position = self.position + 2 * action - 1
        done = (self.position == 0) | (self.position == CELLS - 1)
        reward = (self.position == CELLS - 1).float() - 0.01
        self.position = torch.where(done, torch.full_like(self.position, CELLS // 2), self.position)
        return reward, done.float()


class Agent(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(CELLS, 32), nn.Tanh(), nn.Linear(32, 2))
        self.critic = nn.Sequential(nn.Linear(CELLS, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, observation):
        return self.actor(observation), self.critic(observation).squeeze(-1)

    def training_step(self, batch):
        observation, action, old_log_prob, advantage, target = batch
        logits, value = self(observation)
        distribution = Categorical(logits=logits)
        ratio = (distribution.log_prob(action) - old_log_prob).exp()
        policy_loss = -torch.min(ratio * advantage, ratio.clamp(1 - CLIP, 1 + CLIP) * advantage).mean()
        value_loss = 0.5 * (value - target).pow(2).mean()
        entropy = distribution.entropy().mean()
        self.log("policy_loss", policy_loss.detach())
        self.log_dict({"value_loss": value_loss.detach(), "entropy": entropy.detach()})
        return policy_loss + 0.5 * value_loss - 0.01 * entropy


@torch.no_grad()
def rollout(agent, env: Corridor, device: torch.device) -> tuple[torch.Tensor, ...]:
    observations, actions, log_probs, rewards, dones, values = [], [], [], [], [], []
    for _ in range(STEPS):
        observation = env.observe().to(device)
        logits, value = agent(observation)
        distribution = Categorical(logits=logits)
        action = distribution.sample()
        reward, done = env.step(action.cpu())
        observations.append(observation)
        actions.append(action)
        log_probs.append(distribution.log_prob(action))
        values.append(value)
        rewards.append(reward.to(device))
        dones.append(done.to(device))
    _, next_value = agent(env.observe().to(device))
    returns, running = [], next_value
    for reward, done in zip(reversed(rewards), reversed(dones), strict=True):
        running = reward + GAMMA * running * (1 - done)
        returns.append(running)
    returns = torch.stack(returns[::-1])
    advantages = returns - torch.stack(values)
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return (torch.cat(observations), torch.cat(actions), torch.cat(log_probs), advantages.flatten(),
            returns.flatten(), torch.stack(rewards).sum() / ENVS)


@torch.no_grad()
def greedy_return(agent, device: torch.device) -> float:
    env, total = Corridor(1), 0.0
    for _ in range(CELLS * 2):
        logits, _ = agent(env.observe().to(device))
        reward, done = env.step(logits.argmax(-1).cpu())
        total += reward.item()
        if done.item():
            break
    return total


def main(fabric: Fabric, root: str) -> None:
    fabric.seed_everything(5 + fabric.global_rank)
    agent = Agent()
    optimizer = torch.optim.Adam(agent.parameters(), lr=0.01)
    agent, optimizer = fabric.setup(agent, optimizer)
    expect(agent.fabric is fabric, f"the agent's self.fabric is {agent.fabric!r}, not the Fabric it was set up with")
    expect(agent.logger is fabric.logger, "the agent's self.logger is not the Fabric's logger")
    env = Corridor(ENVS)
    collected = []
    for _ in range(ITERATIONS):
        *data, reward = rollout(agent, env, fabric.device)
        collected.append(reward.item())
        for _ in range(UPDATE_EPOCHS):
            for indices in torch.randperm(ENVS * STEPS).split(MINIBATCH):
                loss = agent.training_step([tensor[indices] for tensor in data])
                optimizer.zero_grad()
                fabric.backward(loss)
                optimizer.step()
        fabric.log("reward", reward.item())
    # (a LightningModule's self.print fails under Lightning 2.6.6's Fabric: it reads self.trainer.progress_bar_callback)
    fabric.print(f"mean reward per environment per rollout, first {collected[0]:.3f}, last {collected[-1]:.3f}")
    fabric.logger.finalize("success")

    expect(greedy_return(agent, fabric.device) > 0.9, "the greedy agent does not walk to the goal")
    if fabric.is_global_zero:
        with open(Path(fabric.logger.log_dir) / "metrics.csv") as handle:
            rows = list(csv.DictReader(handle))
        logged = {name for row in rows for name, value in row.items() if value}
        expect({"policy_loss", "value_loss", "entropy", "reward"} <= logged, f"the CSV file has {sorted(logged)}")
        expect(Path(fabric.logger.log_dir).is_relative_to(root), f"the logger wrote to {fabric.logger.log_dir}")
    weights = torch.cat([p.detach().flatten() for p in agent.parameters()])
    gathered = fabric.all_gather(weights)
    if fabric.world_size > 1:
        expect(all(torch.equal(gathered[0], other) for other in gathered[1:]), "the processes' weights differ")
    last = fabric.all_reduce(torch.tensor(collected[-1], device=fabric.device))
    report(fabric, last_rollout_reward=last.item(), greedy_return=greedy_return(agent, fabric.device),
           weight_sum=weights.sum().item())


if __name__ == "__main__":
    args = parse_args(__doc__)
    fabric = Fabric(**fabric_kwargs(args), loggers=CSVLogger(root_dir=args.root, name="rl"))
    fabric.launch(main, args.root)
    ok("rl_agent", fabric)
