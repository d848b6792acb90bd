# All records of the site -> tidy table and Markdown summary (printed at the end).


localrules:
    aggregate,


rule aggregate:
    input:
        get_records,
    output:
        csv=f"{RESULTS}/tables/results.csv",
        markdown=f"{RESULTS}/tables/summary.md",
    log:
        f"{LOGS}/aggregate.log",
    shell:
        "{EXABENCH} aggregate --site-name {SITE.name} --csv {output.csv} --markdown {output.markdown} "
        "{input} > {log} 2>&1"


onsuccess:
    summary = Path(f"{RESULTS}/tables/summary.md")
    if summary.exists():
        print("\n" + summary.read_text() + f"\nTable: {RESULTS}/tables/results.csv")
    from exabench.report import final_summary

    print("\n" + final_summary(RESULTS, SITE.name))
