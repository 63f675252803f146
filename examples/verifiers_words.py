# A single-turn verifiers 0.4 taskset (docs/remote_envs.md#verifiers-environments): write a word
# backwards; the task's own Python @reward scores the decoded completion.
import verifiers.v1 as vf


class WordData(vf.TaskData):
    answer: str = ""


class WordTask(vf.Task[WordData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def correct(self, task, trace) -> float:
        return float(trace.last_reply == task.answer)


class MyWords(vf.Taskset[WordTask, vf.TasksetConfig]):
    def load(self):
        for w in ["cat", "dog", "sun", "map", "pen", "cup"]:
            yield WordTask(WordData(prompt=f"Write {w} backwards.", answer=w[::-1]), self.config.task)


__all__ = ["MyWords"]
