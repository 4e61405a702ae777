; Inno Setup 6.3+ script: Draftlight's Windows installer, from the PyInstaller bundle in dist\Draftlight.
; Run by installers\windows\build.ps1:
;   ISCC.exe /DAppVersion=0.1.0 /DOutputName=Draftlight-0.1.0-windows-x64-setup /DFlavour=cpu installers\windows\draftlight.iss
; Relative paths below are relative to this file's folder.
; Installs per user by default (no administrator needed; the dialog offers all users), adds a Start
; menu entry and an optional desktop icon. Uninstalling keeps the user's chats, settings and models
; (%LOCALAPPDATA%\Draftlight).

#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif
#ifndef OutputName
  #define OutputName "Draftlight-" + AppVersion + "-windows-x64-setup"
#endif
#ifndef Flavour
  #define Flavour "cpu"
#endif

[Setup]
AppId={{7C1F3E52-5D0B-4C3A-9E7D-0F2B8A4D6E11}
AppName=Draftlight
AppVersion={#AppVersion}
AppVerName=Draftlight {#AppVersion} ({#Flavour})
AppPublisher=Draftlight
AppComments=A local chat that shows speculative decoding at work
DefaultDirName={autopf}\Draftlight
DefaultGroupName=Draftlight
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0
OutputDir=..\..\dist
OutputBaseFilename={#OutputName}
SetupIconFile=..\icons\draftlight.ico
UninstallDisplayIcon={app}\Draftlight.exe
UninstallDisplayName=Draftlight
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
CloseApplications=yes

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "..\..\dist\Draftlight\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[InstallDelete]
; A new version replaces the old bundle completely: no stale DLLs from an earlier flavour.
Type: filesandordirs; Name: "{app}\_internal"

[Icons]
Name: "{autoprograms}\Draftlight"; Filename: "{app}\Draftlight.exe"
Name: "{autodesktop}\Draftlight"; Filename: "{app}\Draftlight.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\Draftlight.exe"; Description: "{cm:LaunchProgram,Draftlight}"; Flags: nowait postinstall skipifsilent
