#!/usr/bin/env python3
"""Finds RL training environments (subclasses of Atropos' BaseEnv) for the local-agent.

Two modes, each printing one JSON document on stdout:

  scan DIR...          Parse every *.py file (not starting with "_") with Python's own ast
                       module: nothing is imported or run. Reports each BaseEnv subclass
                       (name, class, file, first docstring line, config class) and, when the
                       config class is defined in the same file, its annotated fields. A file
                       that does not parse is reported under "problems", not fatal.
  fields FILE CLASS    Import FILE and read the config fields of CLASS from the config object
                       its config_init() returns (or its env_config_cls): complete, including
                       fields inherited from the library. Imports run the module's code, so
                       the agent runs this per file, in its own process, with a deadline.

Only the standard library is used; pydantic (v2 model_fields or v1 __fields__) is read
through the config class itself when the environment brings it.
"""
import ast
import contextlib
import importlib.util
import json
import os
import sys

BASE = "BaseEnv"


def base_names(cls):
    for b in cls.bases:
        if isinstance(b, ast.Name):
            yield b.id
        elif isinstance(b, ast.Attribute):
            yield b.attr
        elif isinstance(b, ast.Subscript):  # Generic[...]-style bases
            v = b.value
            yield v.id if isinstance(v, ast.Name) else getattr(v, "attr", "")


def env_classes(tree):
    """BaseEnv subclasses, also through other classes of the same file (class B(A), A(BaseEnv))."""
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    found = {}

    def is_env(name, seen):
        if name == BASE:
            return True
        node = classes.get(name)
        if node is None or name in seen:
            return False
        return any(is_env(b, seen | {name}) for b in base_names(node))

    for name, node in classes.items():
        if name != BASE and any(is_env(b, {name}) for b in base_names(node)):
            found[name] = node
    return found, classes


def constant(node):
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None, False
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return (list(value) if isinstance(value, (tuple, set)) else repr(value)), True
    return value, True


def field_from_ast(stmt):
    """An annotated field `name: type = default` or `= Field(default=..., description=...)`."""
    name = stmt.target.id
    type_text = ast.unparse(stmt.annotation)
    default, description = None, ""
    value = stmt.value
    if isinstance(value, ast.Call) and (getattr(value.func, "id", None) == "Field" or getattr(value.func, "attr", None) == "Field"):
        if value.args and not (isinstance(value.args[0], ast.Constant) and value.args[0].value is Ellipsis):
            default, _ = constant(value.args[0])
        for kw in value.keywords:
            if kw.arg == "default":
                default, _ = constant(kw.value)
            elif kw.arg == "description":
                d, ok = constant(kw.value)
                description = d if ok and isinstance(d, str) else ""
    elif value is not None:
        default, _ = constant(value)
    return {"name": name, "type": type_text, "default": default, "description": description}


def config_fields(config_name, classes):
    """Fields of a config class defined in this file, bases first, as pydantic orders them."""
    node = classes.get(config_name)
    if node is None:
        return None
    fields = {}
    for b in base_names(node):
        if b != config_name:
            for f in config_fields(b, classes) or []:
                fields[f["name"]] = f
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and not stmt.target.id.startswith("_"):
            fields[stmt.target.id] = field_from_ast(stmt)
    return list(fields.values())


def describe_env(path, node, classes):
    name = os.path.splitext(os.path.basename(path))[0]
    config_class = "BaseEnvConfig"
    for item in node.body:
        if isinstance(item, ast.Assign):
            for target in item.targets:
                if isinstance(target, ast.Name) and target.id == "name" and isinstance(item.value, ast.Constant) and isinstance(item.value.value, str):
                    name = item.value.value
                elif isinstance(target, ast.Name) and target.id == "env_config_cls" and isinstance(item.value, (ast.Name, ast.Attribute)):
                    config_class = ast.unparse(item.value).split(".")[-1]
    doc = ast.get_docstring(node) or ""
    fields = config_fields(config_class, classes)
    return {
        "name": name,
        "class_name": node.name,
        "file_path": os.path.abspath(path),
        "description": doc.strip().split("\n")[0].strip() or f"Environment from {os.path.basename(path)}",
        "config_class": config_class,
        "fields": fields,
        "fields_source": "ast" if fields is not None else None,
        "fields_error": None if fields is not None else f"config class {config_class} is not defined in this file; importing the module is needed to read its fields",
    }


def scan(directories):
    environments, problems, names = [], [], {}
    for directory in directories:
        if not os.path.isdir(directory):
            problems.append({"file_path": directory, "error": "not a directory"})
            continue
        for entry in sorted(os.listdir(directory)):
            if not entry.endswith(".py") or entry.startswith("_"):
                continue
            path = os.path.join(directory, entry)
            try:
                with open(path, "r", encoding="utf-8") as f:
                    tree = ast.parse(f.read(), filename=path)
            except SyntaxError as e:
                problems.append({"file_path": os.path.abspath(path), "error": f"SyntaxError: {e.msg} (line {e.lineno})"})
                continue
            except (OSError, UnicodeDecodeError, ValueError) as e:
                problems.append({"file_path": os.path.abspath(path), "error": f"{type(e).__name__}: {e}"})
                continue
            found, classes = env_classes(tree)
            for node in sorted(found.values(), key=lambda n: n.lineno):
                env = describe_env(path, node, classes)
                if env["name"] in names:
                    problems.append({"file_path": env["file_path"], "error": f"environment name {env['name']!r} is already used by {names[env['name']]}; skipped"})
                    continue
                names[env["name"]] = env["file_path"]
                environments.append(env)
    return {"environments": environments, "problems": problems}


def type_text(annotation):
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def jsonable(value):
    if type(value).__name__ in ("PydanticUndefinedType", "UndefinedType"):
        return None
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, (tuple, set, frozenset)):
            return [jsonable(v) for v in value]
        return str(value)


def fields(path, class_name):
    directory = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, directory)
    # The module's own prints must not end up in our JSON.
    with contextlib.redirect_stdout(sys.stderr):
        spec = importlib.util.spec_from_file_location("rollout_env_module", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["rollout_env_module"] = module
        spec.loader.exec_module(module)
        cls = getattr(module, class_name)
        config = None
        if callable(getattr(cls, "config_init", None)):
            made = cls.config_init()
            config = made[0] if isinstance(made, tuple) else made
        config_cls = type(config) if config is not None else getattr(cls, "env_config_cls", None)
    if config_cls is None:
        raise LookupError(f"{class_name} has neither config_init() nor env_config_cls")
    model = getattr(config_cls, "model_fields", None)
    out = []
    if model is not None:  # pydantic v2
        for name, info in model.items():
            default = getattr(config, name) if config is not None else info.default
            out.append({"name": name, "type": type_text(info.annotation), "default": jsonable(default), "description": info.description or ""})
    elif getattr(config_cls, "__fields__", None) is not None:  # pydantic v1
        for name, info in config_cls.__fields__.items():
            default = getattr(config, name) if config is not None else info.default
            out.append({"name": name, "type": type_text(info.outer_type_), "default": jsonable(default), "description": info.field_info.description or ""})
    else:
        raise LookupError(f"{config_cls.__name__} is not a pydantic model")
    return {"config_class": config_cls.__name__, "fields": out}


def main(argv):
    if len(argv) >= 2 and argv[1] == "scan":
        print(json.dumps(scan(argv[2:])))
        return 0
    if len(argv) == 4 and argv[1] == "fields":
        try:
            print(json.dumps(fields(argv[2], argv[3])))
        except BaseException as e:  # any failure of foreign code, SystemExit included, is reported
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
