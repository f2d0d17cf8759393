/**
 * The demo's task family: pick the right tool for a question among four. The rollout client
 * owns the tasks and their answers (it builds the prompt and scores the reply); the policy sees
 * only the prompt. Chance is 1/4, so a climbing reward is learning, not luck.
 */
export const TOOLS = ["search", "calculator", "calendar", "translator"] as const;
export type Tool = (typeof TOOLS)[number];

export type Task = { id: string; question: string; answer: Tool };

export const TASKS: readonly Task[] = [
  { id: "t0", question: "What is 17 times 23?", answer: "calculator" },
  { id: "t1", question: "How do you say 'good morning' in Japanese?", answer: "translator" },
  { id: "t2", question: "Which weekday is the 3rd of March next year?", answer: "calendar" },
  { id: "t3", question: "Who won the last Tour de France?", answer: "search" },
  { id: "t4", question: "What is the square root of 7921?", answer: "calculator" },
  { id: "t5", question: "Am I free next Tuesday at 10?", answer: "calendar" },
  { id: "t6", question: "What does 'Weltschmerz' mean in English?", answer: "translator" },
  { id: "t7", question: "What is the population of Lagos today?", answer: "search" },
];

const PROMPT_HEAD = "Pick the one tool that answers the question. Tools: search, calculator, calendar, translator. Answer with the tool's name only.\nQuestion: ";

export function prompt(task: Task): string {
  return PROMPT_HEAD + task.question;
}

/** The task a prompt asks, as the policy reads it; null for a prompt of no task. */
export function taskOfPrompt(text: string): Task | null {
  if (!text.startsWith(PROMPT_HEAD)) return null;
  const question = text.slice(PROMPT_HEAD.length);
  return TASKS.find((t) => t.question === question) ?? null;
}

export function reward(task: Task, reply: string): number {
  return reply.trim().toLowerCase() === task.answer ? 1 : 0;
}
