# A multi-turn verifiers 0.4 environment (docs/remote_envs.md#multi-turn-environments): guess a
# number from 1 to 8; the env's run() answers each wrong guess with "higher" or "lower", and the
# task's own Python @reward scores the whole dialogue (1 / guesses when found, else 0).
import verifiers.v1 as vf


class GuessData(vf.TaskData):
    answer: int = 1


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def found(self, task, trace) -> float:
        return 1.0 / trace.num_turns if trace.last_reply == str(task.answer) else 0.0


class Guess(vf.Taskset[GuessTask, vf.TasksetConfig]):
    def load(self):
        for n in range(1, 9):
            yield GuessTask(GuessData(prompt="Guess my number from 1 to 8.", answer=n), self.config.task)


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()  # the one seat: jaxrl's policy plays it


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as game:
            segment = await game.turn()  # the task's prompt opens: the model's first guess
            while not segment.terminated:  # terminated: the turn limit (env.verifiers.turns) was reached
                guess = segment.last_reply
                if guess == str(task.data.answer):
                    break
                hint = "higher" if guess.isdigit() and int(guess) < task.data.answer else "lower"
                segment = await game.turn(f"No, {hint}.")


__all__ = ["Guess", "GuessEnv"]
