"""The reward that scripts/train_agent.py trains with. Edit it.

reward(pos, next_pos, event, goal) -> float, for one move from pos to next_pos (row, col);
event is "goal" (reached the goal), "trap" (fell into a trap) or "step" (anything else).
"""

GOAL_REWARD = 1.0
TRAP_REWARD = 0.0
STEP_REWARD = 0.0
SHAPING_WEIGHT = 0.0  # times the decrease of the Manhattan distance to the goal


def reward(pos, next_pos, event, goal):
    r = {"goal": GOAL_REWARD, "trap": TRAP_REWARD}.get(event, STEP_REWARD)
    if SHAPING_WEIGHT:
        dist = abs(pos[0] - goal[0]) + abs(pos[1] - goal[1])
        next_dist = abs(next_pos[0] - goal[0]) + abs(next_pos[1] - goal[1])
        r += SHAPING_WEIGHT * (dist - next_dist)
    return r
