# Acceptance against the site's references (a named target, not part of `all`):
#   snakemake --profile profiles/<site> acceptance
# Verdicts and JUnit XML are always written; the `acceptance` rule then fails, naming the
# failing runs, when any run fails (so CI sees a non-zero exit and keeps the JUnit file).
REFERENCES = config.get("references") or str(Path(config["site"]).parent / "references.yaml")
ACCEPTANCE = f"{RESULTS}/acceptance"


localrules:
    acceptance_verdicts,
    acceptance,


rule acceptance_verdicts:
    input:
        records=get_records,
        plan=f"{RESULTS}/plan.json",
        references=REFERENCES,
    output:
        markdown=report(f"{ACCEPTANCE}/verdicts.md", caption="../report/acceptance.rst", category="Acceptance"),
        csv=f"{ACCEPTANCE}/verdicts.csv",
        junit=f"{ACCEPTANCE}/junit.xml",
    log:
        f"{LOGS}/acceptance_verdicts.log",
    shell:
        "{EXABENCH} accept --references {input.references} --plan {input.plan} --site-name {SITE.name} "
        "--markdown {output.markdown} --csv {output.csv} --junit {output.junit} {input.records} > {log} 2>&1"


rule acceptance:
    input:
        verdicts=f"{ACCEPTANCE}/verdicts.csv",
        junit=f"{ACCEPTANCE}/junit.xml",
    output:
        touch(f"{ACCEPTANCE}/accepted"),
    log:
        f"{LOGS}/acceptance.log",
    shell:
        "{EXABENCH} accept-check --verdicts {input.verdicts} 2>&1 | tee {log}"
