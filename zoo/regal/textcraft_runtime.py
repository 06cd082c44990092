"""A TextCraft environment built from a task's own crafting commands, as it runs *inside* `zoo.sandbox`
(standard library only; its source is put in front of every TextCraft program, see `zoo.regal.domains`).

The paper's environment is ADaPT's TextCraft (Prasad et al. 2023), which needs Minecraft's recipe files; it is
not in the official ReGAL repository. This one follows ADaPT's action grammar and messages (``get N item``,
``craft N item using N a, N b``, ``inventory``) but knows only the recipes listed in the task's
``metadata`` ("Crafting commands: ..."): an item is craftable iff some listed command makes it, an item that
appears only as an ingredient can be fetched with ``get``, and a craft succeeds iff its ingredients equal a
listed recipe for that item exactly (as ADaPT's ``CraftingTree.craft``) and are in the inventory; it yields the
recipe's own count. Minecraft's item tags (a recipe asking for "planks" takes "oak planks") are approximated by
name: an ingredient that no command makes matches any item whose name ends with it. Items outside the listed
commands cannot be fetched (ADaPT knows every Minecraft item), so this is an approximation of the paper's
environment, not a copy of it.

Every command is logged (``_regal_env.log``); the parent replays the log on its own copy of this class, so
the verdict never depends on state the program could have edited.
"""

import re


def _norm(name):
    return " ".join(name.strip().lower().replace("minecraft:", "").replace("_", " ").split())


def _count_item(text):
    m = re.match(r"\s*([0-9]+) (.*)", text)
    return (int(m.group(1)), _norm(m.group(2))) if m else None


def parse_crafting_commands(text):
    """[(output item, output count, ((ingredient, count), ...))] from 'craft N x using N a, N b' lines."""
    recipes = []
    for line in text.splitlines():
        m = re.match(r"\s*craft (.*) using (.*)$", line.strip())
        if not m:
            continue
        out = _count_item(m.group(1)) or (1, _norm(m.group(1)))
        ins = [_count_item(x) for x in m.group(2).split(",")]
        if all(ins):
            recipes.append((out[1], out[0], tuple(sorted((i, c) for c, i in ins))))
    return recipes


class CraftingCommandsEnv:
    def __init__(self, crafting_commands):
        self.recipes = parse_crafting_commands(crafting_commands)
        self.craftable = {r[0] for r in self.recipes}
        self.fetchable = {i for r in self.recipes for i, _ in r[2]} - self.craftable
        self.inventory = {}
        self.log = []

    def _inventory(self):
        if not self.inventory:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + "".join(f"[{item}] ({n}) " for item, n in self.inventory.items())

    def _craft(self, target, ingredients):
        out = _count_item(target) or (1, _norm(target))
        wanted = []
        for part in ingredients.split(","):
            ci = _count_item(part)
            if ci is None:
                return f"Wrong item format: {part.strip()}"
            wanted.append((ci[1], ci[0]))
        if any(self.inventory.get(item, 0) < n for item, n in wanted):
            return f"Could not find enough items to craft minecraft:{out[1].replace(' ', '_')}"
        for item, count, ins in self.recipes:
            if item == out[1] and self._matches(ins, wanted):
                for i, n in wanted:
                    self.inventory[i] -= n
                    if self.inventory[i] == 0:
                        del self.inventory[i]
                self.inventory[item] = self.inventory.get(item, 0) + count
                return f"Crafted {count} minecraft:{item.replace(' ', '_')}"
        return f"Could not find a valid recipe for {out[1]}"

    def _matches(self, recipe_items, wanted):
        """Each wanted (item, n) pairs with one recipe ingredient of the same count: the same name, or a tag
        (an ingredient nothing makes) that the item's name ends with."""
        if len(recipe_items) != len(wanted):
            return False
        left = list(recipe_items)
        for item, n in sorted(wanted, key=lambda x: x[0] in {r for r, _ in recipe_items}, reverse=True):
            hit = next((r for r in left if r[1] == n and (r[0] == item or (
                r[0] not in self.craftable and item.endswith(" " + r[0])))), None)
            if hit is None:
                return False
            left.remove(hit)
        return True

    def step(self, command):
        command = str(command)
        self.log.append(command)
        m = re.match(r"craft (.*) using (.*)", command)
        if m:
            return self._craft(m.group(1), m.group(2))
        m = re.match(r"get ([0-9]+) (.*)", command)
        if m:
            item, n = _norm(m.group(2)), int(m.group(1))
            if item not in self.fetchable:
                return f"Could not find {m.group(2)}"
            self.inventory[item] = self.inventory.get(item, 0) + n
            return f"Got {n} {m.group(2)}"
        if re.match(r"inventory", command):
            return self._inventory()
        return f"Could not execute {command}"


# The primitives of the official TextCraft header, bound to one environment (`_regal_env`, made by the
# prelude right after this source).
def step(command):
    return _regal_env.step(command)


def check_inventory():
    obs = step("inventory")
    print(obs)
    return obs


def get_object(target):
    print(step("get " + target))


def craft_object(target, ingredients):
    print(step("craft " + target + " using " + ", ".join(ingredients)))
