import sys; sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
exec(open("exp_state.py").read().split("os.makedirs")[0].replace('print(f"== {name} top-level', 'pass  # print(f"== {name} top-level').replace("for i, s in enumerate(SEEN)", "for i, s in []"))
for plan in et.executorch_program.execution_plan:
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        if type(a).__name__ == "DelegateCall":
            vals = [type(plan.values[i].val).__name__ + str(tuple(plan.values[i].val.sizes)) if hasattr(plan.values[i].val, "sizes") else type(plan.values[i].val).__name__ for i in a.args]
            print(plan.name, "DelegateCall args (value ids):", a.args, vals, "| method inputs", plan.inputs, "outputs", plan.outputs)
