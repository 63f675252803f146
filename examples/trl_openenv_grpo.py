"""GRPO with TRL on a jaxrl env served by ``jaxrl serve`` over OpenEnv's protocol (not run in CI).

A language model plays CartPole-v1 through text: each turn it reads the four state variables
and answers ``0`` (push left) or ``1`` (push right). TRL's ``GRPOTrainer`` calls
``rollout_func(prompts, trainer)`` (the signature of TRL's own OpenEnv examples,
``examples/scripts/openenv/catch.py``); here it opens one WebSocket session per prompt with
OpenEnv's ``GenericEnvClient``, resets each with the seed written in its prompt (the
``num_generations`` copies of a prompt share it, so GRPO compares answers from the same
start), then advances every live episode in lockstep: one batched vLLM generation for all
of them, then all their steps sent at once, which ``jaxrl serve`` applies in one device call.
The reward is the episode's return over ``--max-turns`` steps, divided by ``--max-turns``.

    pip install 'jaxrl[serve]' 'trl[vllm]' datasets 'openenv-core>=0.3'
    jaxrl serve CartPole-v1 --max-sessions 512 --port 8001 &
    python examples/trl_openenv_grpo.py --env-url http://127.0.0.1:8001 --model Qwen/Qwen2.5-0.5B-Instruct

Any registered id works the same way (``jaxrl serve ENV_ID``); only ``BASE_PROMPT`` and
``parse_action`` know CartPole. See docs/serving.md.
"""

from __future__ import annotations

import argparse
import asyncio
import re

try:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer, apply_chat_template
    from trl.experimental.openenv import generate_rollout_completions
except ModuleNotFoundError as exc:  # pragma: no cover - TRL is not a jaxrl dependency
    raise SystemExit(f"this example needs TRL with vLLM ({exc.name} is missing): pip install 'trl[vllm]' datasets") from None
try:
    from openenv.core.generic_client import GenericEnvClient
except ModuleNotFoundError:  # pragma: no cover
    raise SystemExit("this example needs OpenEnv's client: pip install 'openenv-core>=0.3'") from None

BASE_PROMPT = """You balance a pole on a cart (CartPole). Each turn you see the cart position (m), cart
velocity (m/s), pole angle (rad, 0 is upright) and pole angular velocity (rad/s).
Answer with one digit only: 0 pushes the cart left, 1 pushes it right.
Keep the pole upright and the cart within 2.4 m of the centre as long as you can."""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-url", default="http://127.0.0.1:8001", help="where `jaxrl serve` listens")
    p.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    p.add_argument("--episodes", type=int, default=256, help="distinct start states (dataset rows)")
    p.add_argument("--max-turns", type=int, default=32, help="steps per episode the model plays")
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--vllm-mode", choices=["colocate", "server"], default="colocate")
    p.add_argument("--vllm-server-url", default="http://localhost:8000")
    return p.parse_args()


def describe(obs: list[float]) -> str:
    x, x_dot, theta, theta_dot = obs
    return f"cart position {x:+.3f}, cart velocity {x_dot:+.3f}, pole angle {theta:+.3f}, pole angular velocity {theta_dot:+.3f}"


def parse_action(text: str) -> int:
    """The first 0 or 1 in the completion; 0 when there is none (an unparsable answer still moves)."""
    found = re.search(r"[01]", text)
    return int(found.group()) if found else 0


def seed_of(prompt: str) -> int:
    return int(re.search(r"Episode (\d+)\.", prompt).group(1))


async def play(prompts: list[str], trainer, env_url: str, max_turns: int) -> dict[str, list]:
    """One episode per prompt, all advanced together; returns TRL's rollout dict."""
    tokenizer = trainer.processing_class
    clients = [GenericEnvClient(base_url=env_url) for _ in prompts]
    await asyncio.gather(*(c.connect() for c in clients))
    try:
        results = await asyncio.gather(*(c.reset(seed=seed_of(p)) for c, p in zip(clients, prompts)))
        obs = [r.observation["obs"] for r in results]
        live = [True] * len(prompts)
        returns = [0.0] * len(prompts)
        prompt_ids = [[] for _ in prompts]
        completion_ids = [[] for _ in prompts]
        logprobs = [[] for _ in prompts]
        for _ in range(max_turns):
            idx = [i for i, alive in enumerate(live) if alive]
            if not idx:
                break
            texts = [
                apply_chat_template({"prompt": [{"role": "user", "content": f"{prompts[i]}\n\nNow: {describe(obs[i])}"}]}, tokenizer)["prompt"]
                for i in idx
            ]
            outs = generate_rollout_completions(trainer, texts)  # one batched generation for every live episode
            actions = []
            for i, out in zip(idx, outs):
                prompt_ids[i].extend(out["prompt_ids"])
                completion_ids[i].extend(out["completion_ids"])
                logprobs[i].extend(out["logprobs"])
                actions.append(parse_action(tokenizer.decode(out["completion_ids"], skip_special_tokens=True)))
            # All steps in flight at once: the server applies them in one batched device call.
            steps = await asyncio.gather(*(clients[i].step({"action": a}) for i, a in zip(idx, actions)))
            for i, r in zip(idx, steps):
                returns[i] += float(r.reward or 0.0)
                obs[i] = r.observation["obs"]
                live[i] = not r.done
        return {
            "prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs,
            "env_reward": [ret / max_turns for ret in returns],
        }
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def reward_from_env(completions, **kwargs) -> list[float]:
    rewards = kwargs.get("env_reward") or []
    return [float(r) for r in rewards] if rewards else [0.0] * len(completions)


def main() -> None:
    args = parse_args()
    dataset = Dataset.from_dict({"prompt": [f"{BASE_PROMPT}\n\nEpisode {k}." for k in range(args.episodes)]})
    config = GRPOConfig(
        output_dir=f"{args.model.split('/')[-1]}-GRPO-jaxrl-CartPole",
        use_vllm=True,
        vllm_mode=args.vllm_mode,
        vllm_server_base_url=args.vllm_server_url if args.vllm_mode == "server" else None,
        num_generations=args.num_generations,
        max_completion_length=4,
        logging_steps=1,
        num_train_epochs=1,
    )

    def rollout_func(prompts: list[str], trainer: GRPOTrainer) -> dict[str, list]:
        return asyncio.run(play(prompts, trainer, args.env_url, args.max_turns))

    trainer = GRPOTrainer(
        model=args.model, reward_funcs=reward_from_env, args=config, train_dataset=dataset, rollout_func=rollout_func,
    )
    trainer.train()


if __name__ == "__main__":
    main()
