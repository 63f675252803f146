"""A multi-turn verifiers 0.4 (``verifiers.v1``) environment for tests/test_verifiers_env.py:
guess a number from 1 to 4; after a wrong guess the env answers ``higher`` or ``lower``
(its ``Env.run`` drives the ``player`` seat turn by turn) and the task's Python
``@reward`` pays the found number, more for fewer guesses. Secret 5 (``boom``) makes the
env's run raise on purpose; secret 6 makes the reward raise."""

import verifiers.v1 as vf


class GuessData(vf.TaskData):
    answer: int = 1


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def found(self, task, trace) -> float:
        if task.answer == 6:
            raise RuntimeError("this reward fails on purpose")
        return 1.0 / trace.num_turns if trace.last_reply == str(task.answer) else 0.0


class GuessConfig(vf.TasksetConfig):
    secrets: list[int] = [1, 2, 3, 4]


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self):
        for s in self.config.secrets:
            yield GuessTask(GuessData(prompt="Guess my number from 1 to 4.", answer=s), self.config.task)


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        secret = task.data.answer
        async with agents.player.interaction(task) as game:
            segment = await game.turn()  # the prompted task speaks first: the first guess
            while not segment.terminated:
                if secret == 5:
                    raise RuntimeError("this env fails on purpose")
                guess = segment.last_reply
                if guess == str(secret):
                    break
                hint = "higher" if guess.isdigit() and int(guess) < secret else "lower"
                segment = await game.turn(f"No, {hint}.")


__all__ = ["GuessEnv", "GuessTaskset"]
